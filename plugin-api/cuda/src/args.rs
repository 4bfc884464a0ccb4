//! Kernel arguments: what a launch passes, and the check of a launch's argument list against
//! the kernel's parameters as the driver reports them.

/// The most parameters a kernel launched through [`Kernel::launch`](crate::Kernel::launch) may
/// have.
pub const MAX_KERNEL_PARAMS: usize = 64;

/// One argument of a kernel launch. Its size must equal the kernel parameter's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg {
    /// `unsigned int` / `u32`: 4 bytes.
    U32(u32),
    /// `int` / `i32`: 4 bytes.
    I32(i32),
    /// `unsigned long long` / `u64`: 8 bytes.
    U64(u64),
    /// `float`: 4 bytes.
    F32(f32),
    /// Any pointer parameter (`const u8*`, `u8*`, ...): a device address, 8 bytes.
    DevicePtr(u64),
}

impl KernelArg {
    /// Bytes the argument takes in the kernel's parameter buffer.
    pub fn size(&self) -> usize {
        match self {
            KernelArg::U32(_) | KernelArg::I32(_) | KernelArg::F32(_) => 4,
            KernelArg::U64(_) | KernelArg::DevicePtr(_) => 8,
        }
    }

    /// The value's bytes in native order, padded to 8.
    pub(crate) fn bytes(&self) -> ArgSlot {
        let mut slot = ArgSlot([0; 8]);
        match *self {
            KernelArg::U32(v) => slot.0[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::I32(v) => slot.0[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::F32(v) => slot.0[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::U64(v) | KernelArg::DevicePtr(v) => slot.0 = v.to_ne_bytes(),
        }
        slot
    }
}

/// Storage of one argument value, aligned for any scalar parameter.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
pub(crate) struct ArgSlot(pub(crate) [u8; 8]);

/// Where one kernel parameter sits in the device-side parameter buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamInfo {
    pub offset: usize,
    pub size: usize,
}

/// `Ok` when `args` has as many entries as the kernel has parameters and each has the
/// parameter's size; else why not, in words.
pub(crate) fn check_args(params: &[ParamInfo], args: &[KernelArg]) -> Result<(), String> {
    if params.len() != args.len() {
        return Err(format!("takes {} parameters, the launch passes {}", params.len(), args.len()));
    }
    for (i, (param, arg)) in params.iter().zip(args).enumerate() {
        if param.size != arg.size() {
            return Err(format!(
                "parameter {i} is {} bytes, the launch passes {arg:?} ({} bytes)",
                param.size,
                arg.size()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(sizes: &[usize]) -> Vec<ParamInfo> {
        let mut offset = 0usize;
        sizes
            .iter()
            .map(|&size| {
                offset = offset.next_multiple_of(size);
                let p = ParamInfo { offset, size };
                offset += size;
                p
            })
            .collect()
    }

    #[test]
    fn arguments_are_checked_by_count_and_size() {
        let p = params(&[8, 8, 4, 4]);
        let good = [KernelArg::DevicePtr(0x1000), KernelArg::U64(64), KernelArg::U32(3), KernelArg::I32(-1)];
        check_args(&p, &good).unwrap();
        assert_eq!(check_args(&p, &good[..3]).unwrap_err(), "takes 4 parameters, the launch passes 3");
        let mut bad = good;
        bad[1] = KernelArg::U32(64);
        assert_eq!(check_args(&p, &bad).unwrap_err(), "parameter 1 is 8 bytes, the launch passes U32(64) (4 bytes)");
        check_args(&[], &[]).unwrap();
    }

    #[test]
    fn argument_bytes_are_native_order_values() {
        assert_eq!(KernelArg::U32(0x0102_0304).bytes().0[..4], 0x0102_0304u32.to_ne_bytes());
        assert_eq!(KernelArg::I32(-2).bytes().0[..4], (-2i32).to_ne_bytes());
        assert_eq!(KernelArg::F32(1.5).bytes().0[..4], 1.5f32.to_ne_bytes());
        assert_eq!(KernelArg::DevicePtr(u64::MAX - 1).bytes().0, (u64::MAX - 1).to_ne_bytes());
        assert_eq!(std::mem::align_of::<ArgSlot>(), 8);
    }
}
