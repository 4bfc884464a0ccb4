//! DLPack capsules for GPU planes (the legacy `dltensor` capsule every consumer takes): a
//! `DLManagedTensor` that owns only its shape and strides; the bytes stay the ring slot's.
//! The unsafe code of the crate is here: the capsule, and its destructor and deleter.
#![allow(unsafe_code)]

use std::ffi::c_void;

use pyo3::ffi;
use pyo3::prelude::*;

/// `kDLCUDA`.
pub const DEVICE_CUDA: i32 = 2;
/// `kDLUInt`.
const UINT: u8 = 1;

#[repr(C)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// The managed tensor first, so a pointer to it is a pointer to the whole.
#[repr(C)]
struct Owned {
    managed: DLManagedTensor,
    shape: [i64; 3],
    strides: [i64; 3],
}

const NAME: &std::ffi::CStr = c"dltensor";

/// The deleter a consumer calls when it no longer needs the tensor.
unsafe extern "C" fn delete(managed: *mut DLManagedTensor) {
    if !managed.is_null() {
        // SAFETY: every managed tensor we hand out is the first field of a boxed `Owned`
        // (`capsule`), deleted once: by its consumer, or by the capsule if none took it.
        drop(unsafe { Box::from_raw(managed.cast::<Owned>()) });
    }
}

/// A capsule still named `dltensor` was never consumed: its tensor is ours to delete. A
/// consumer renames it (`used_dltensor`) and calls the deleter itself.
unsafe extern "C" fn destroy_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule being destroyed; the checks set no error.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, NAME.as_ptr()) == 1 {
            delete(ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr()).cast::<DLManagedTensor>());
        }
    }
}

/// A `dltensor` capsule viewing `shape` / `strides` (in elements: unsigned integers of `bits`
/// bits, 8 or 16) at device address `addr` on CUDA device `device`.
pub fn capsule(
    py: Python<'_>,
    addr: u64,
    shape: &[i64],
    strides: &[i64],
    device: i32,
    bits: u8,
) -> PyResult<Py<PyAny>> {
    let ndim = shape.len().min(3);
    let mut owned = Box::new(Owned {
        managed: DLManagedTensor {
            dl_tensor: DLTensor {
                data: addr as *mut c_void,
                device: DLDevice { device_type: DEVICE_CUDA, device_id: device },
                ndim: ndim as i32,
                dtype: DLDataType { code: UINT, bits, lanes: 1 },
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete),
        },
        shape: [0; 3],
        strides: [0; 3],
    });
    owned.shape[..ndim].copy_from_slice(&shape[..ndim]);
    owned.strides[..ndim].copy_from_slice(&strides[..ndim]);
    // The arrays live in the box, which does not move.
    owned.managed.dl_tensor.shape = owned.shape.as_mut_ptr();
    owned.managed.dl_tensor.strides = owned.strides.as_mut_ptr();
    let raw = Box::into_raw(owned);
    // SAFETY: `raw` is a valid `Owned`, whose ownership passes to the capsule (or back to us
    // when it cannot be made); the name is a static C string.
    let capsule = unsafe { ffi::PyCapsule_New(raw.cast::<c_void>(), NAME.as_ptr(), Some(destroy_capsule)) };
    if capsule.is_null() {
        // SAFETY: the capsule was not made, so `raw` is still ours alone.
        drop(unsafe { Box::from_raw(raw) });
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference that PyCapsule_New returned.
    Ok(unsafe { Py::from_owned_ptr(py, capsule) })
}
