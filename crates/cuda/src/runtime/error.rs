//! Errors of the CUDA back-end: every CUDA call and launch is checked and named.

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("no CUDA device: use --device cpu ({0})")]
    NoDevice(String),
    #[error("CUDA {what}: {err}")]
    Driver { what: String, err: cudarc::driver::DriverError },
    #[error("compiling kernels/{file}: {log}")]
    Compile { file: String, log: String },
    #[error("kernel cache {path}: {err}")]
    Cache { path: String, err: std::io::Error },
    #[error("{0}")]
    Shape(String),
}

/// A kept error said again (a kernel part that failed to compile fails each use the same way).
impl Clone for CudaError {
    fn clone(&self) -> Self {
        match self {
            CudaError::NoDevice(m) => CudaError::NoDevice(m.clone()),
            CudaError::Driver { what, err } => CudaError::Driver { what: what.clone(), err: *err },
            CudaError::Compile { file, log } => CudaError::Compile { file: file.clone(), log: log.clone() },
            CudaError::Cache { path, err } => {
                CudaError::Cache { path: path.clone(), err: std::io::Error::new(err.kind(), err.to_string()) }
            }
            CudaError::Shape(m) => CudaError::Shape(m.clone()),
        }
    }
}

/// Adds what was being done to a driver error.
pub trait Check<T> {
    fn check(self, what: &str) -> Result<T, CudaError>;
}

impl<T> Check<T> for Result<T, cudarc::driver::DriverError> {
    fn check(self, what: &str) -> Result<T, CudaError> {
        self.map_err(|err| CudaError::Driver { what: what.to_string(), err })
    }
}
