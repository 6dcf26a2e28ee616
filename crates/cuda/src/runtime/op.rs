//! What a step is made of: kernel arguments and the stream operations a step records (graph.rs) and
//! captures (capture.rs), and how a zeroing or a copy is issued.

use cudarc::driver::{sys, CudaFunction, CudaStream, LaunchConfig};

use crate::runtime::error::{Check, CudaError};

/// A kernel argument: a device pointer, a 32-bit integer or a float.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    Ptr(u64),
    I32(i32),
    F32(f32),
}

impl Arg {
    /// The argument's bytes in the low end of a 64-bit slot (what a kernel parameter pointer points at).
    pub fn slot(self) -> u64 {
        match self {
            Arg::Ptr(p) => p,
            Arg::I32(v) => v as u32 as u64,
            Arg::F32(v) => v.to_bits() as u64,
        }
    }

    /// The same kind and bits.
    pub fn same(self, other: Arg) -> bool {
        std::mem::discriminant(&self) == std::mem::discriminant(&other) && self.slot() == other.slot()
    }
}

/// A launch's arguments, kept inline: a step records ~1,400 launches, and a heap list each cost the host
/// an allocation to record and a free to drop (every kernel here takes at most 16).
pub type Args = smallvec::SmallVec<[Arg; 16]>;

/// A side lane of a recorded step, each on a stream of its own while captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lane(pub(crate) usize);

/// Side lanes a step may hold open at once.
pub const LANES: usize = 3;

impl Lane {
    /// Work beside the ops that follow it (the shared expert beside the routed ones, the QSA selection
    /// beside attention's products): `Gpu::side`, joined by `Gpu::join`.
    pub const SIDE: Lane = Lane(0);
    /// Work begun a stage early, across the side lane's forks and joins: a placed block's guessed experts
    /// brought over the bus while its mixer runs (`Gpu::ahead`, joined by `Gpu::join_ahead`).
    pub const AHEAD: Lane = Lane(1);
    /// A second guess beside the first's copies still coming over the bus: a placed block's mixer-input
    /// guess for the experts the guess a stage earlier left (`Gpu::ahead_second`, joined with the lane
    /// ahead by `Gpu::join_ahead`).
    pub const SECOND: Lane = Lane(2);
}

/// One stream operation of a step, or a mark of a side lane: `Fork` starts the lane after everything
/// recorded so far, the ops up to `Back` go on it, and `Join` makes what follows on the main lane wait
/// for it (`Gpu::side`, `Gpu::join`). Outside a graph the marks are nothing and every op runs in the
/// order recorded.
// Most of a step's ops are kernels (the rest side-lane marks and a few zeroings): boxing the kernel's
// arguments would bring back the allocation a launch that inline arguments avoid.
#[allow(clippy::large_enum_variant)]
pub enum Op {
    Kernel { name: &'static str, f: CudaFunction, cfg: LaunchConfig, args: Args },
    Zero { ptr: u64, bytes: usize },
    Copy { dst: u64, src: u64, bytes: usize },
    Fork(Lane),
    Back(Lane),
    Join(Lane),
}

impl Op {
    /// The same node in a graph: the same kernel, or the same zeroing or copy.
    pub(crate) fn same_node(&self, o: &Op) -> bool {
        match (self, o) {
            (Op::Kernel { name: a, .. }, Op::Kernel { name: b, .. }) => a == b,
            (Op::Zero { ptr: a, bytes: n }, Op::Zero { ptr: b, bytes: m }) => a == b && n == m,
            (Op::Copy { dst: a, src: s, bytes: n }, Op::Copy { dst: b, src: t, bytes: m }) => {
                a == b && s == t && n == m
            }
            (Op::Fork(a), Op::Fork(b)) | (Op::Back(a), Op::Back(b)) | (Op::Join(a), Op::Join(b)) => a == b,
            _ => false,
        }
    }

    /// The same launch: grid, block, shared memory and every argument.
    pub(crate) fn same_launch(&self, o: &Op) -> bool {
        match (self, o) {
            (Op::Kernel { cfg: c, args: a, .. }, Op::Kernel { cfg: d, args: b, .. }) => {
                (c.grid_dim, c.block_dim, c.shared_mem_bytes) == (d.grid_dim, d.block_dim, d.shared_mem_bytes)
                    && a.len() == b.len()
                    && a.iter().zip(b).all(|(x, y)| x.same(*y))
            }
            _ => self.same_node(o),
        }
    }
}

/// A zeroing or a copy issued on `stream` (a kernel is not one; the side lane's marks are nothing).
pub(crate) fn issue_copy(stream: &CudaStream, op: &Op) -> Result<(), CudaError> {
    let s = stream.cu_stream();
    // SAFETY: the pointers and sizes come from live buffers (checked by the callers); ordered on the stream.
    match *op {
        Op::Zero { ptr, bytes } => unsafe { sys::cuMemsetD8Async(ptr, 0, bytes, s) }.result().check("zeroing"),
        Op::Copy { dst, src, bytes } => {
            unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, s) }.result().check("copying on the device")
        }
        Op::Kernel { .. } => Err(CudaError::Shape("a kernel is not a copy".into())),
        Op::Fork(_) | Op::Back(_) | Op::Join(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::Arg;

    #[test]
    fn an_argument_is_its_bits_in_the_low_end_of_a_slot() {
        assert_eq!(Arg::I32(-1).slot(), 0xffff_ffff);
        assert_eq!(Arg::I32(7).slot(), 7);
        assert_eq!(Arg::F32(1.0).slot(), 0x3f80_0000);
        assert_eq!(Arg::Ptr(0x7f00_0000_1000).slot(), 0x7f00_0000_1000);
        // A graph's kernel is updated when any argument's bits change, and only then.
        assert!(Arg::F32(f32::NAN).same(Arg::F32(f32::NAN)));
        assert!(!Arg::F32(0.0).same(Arg::F32(-0.0)));
        assert!(!Arg::I32(1).same(Arg::Ptr(1)), "a different kind is a different argument");
        assert!(Arg::Ptr(42).same(Arg::Ptr(42)));
    }
}
