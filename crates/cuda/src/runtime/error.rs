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

/// Adds what was being done to a driver error.
pub trait Check<T> {
    fn check(self, what: &str) -> Result<T, CudaError>;
}

impl<T> Check<T> for Result<T, cudarc::driver::DriverError> {
    fn check(self, what: &str) -> Result<T, CudaError> {
        self.map_err(|err| CudaError::Driver { what: what.to_string(), err })
    }
}
