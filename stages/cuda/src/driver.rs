//! The CUDA driver API (`libcuda.so.1`, opened at run time): just what the harness needs to
//! load PTX, move buffers and launch kernels. A machine without the driver or without a GPU
//! gets [`Error::NoGpu`], never a crash.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

use crate::error::{Error, Result};

type CuResult = c_int;
type CuDevice = c_int;
type CuContext = *mut c_void;
type CuModule = *mut c_void;
type CuFunction = *mut c_void;
type CuDevicePtr = u64;

const CUDA_SUCCESS: CuResult = 0;
const ATTR_CC_MAJOR: c_int = 75;
const ATTR_CC_MINOR: c_int = 76;

/// The driver entry points, copied out of the library (which [`Gpu`] keeps open).
#[derive(Clone, Copy)]
struct Api {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    driver_version: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_count: unsafe extern "C" fn(*mut c_int) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_name: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    device_attr: unsafe extern "C" fn(*mut c_int, c_int, CuDevice) -> CuResult,
    ctx_create: unsafe extern "C" fn(*mut CuContext, c_uint, CuDevice) -> CuResult,
    ctx_destroy: unsafe extern "C" fn(CuContext) -> CuResult,
    ctx_sync: unsafe extern "C" fn() -> CuResult,
    module_load: unsafe extern "C" fn(*mut CuModule, *const c_void) -> CuResult,
    module_unload: unsafe extern "C" fn(CuModule) -> CuResult,
    module_function: unsafe extern "C" fn(*mut CuFunction, CuModule, *const c_char) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevicePtr, usize) -> CuResult,
    mem_free: unsafe extern "C" fn(CuDevicePtr) -> CuResult,
    htod: unsafe extern "C" fn(CuDevicePtr, *const c_void, usize) -> CuResult,
    dtoh: unsafe extern "C" fn(*mut c_void, CuDevicePtr, usize) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch: unsafe extern "C" fn(
        CuFunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
}

/// A CUDA context on device 0, with the driver library kept open.
pub struct Gpu {
    api: Api,
    ctx: CuContext,
    /// Device name, e.g. `Tesla K80`.
    pub name: String,
    /// Compute capability (major, minor).
    pub capability: (i32, i32),
    /// `cuDriverGetVersion`, e.g. 12040 for 12.4.
    pub driver_version: i32,
    _lib: libloading::Library,
}

impl Gpu {
    /// Open the driver and create a context on the first GPU.
    pub fn open() -> Result<Gpu> {
        // SAFETY: loading the driver runs its initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new("libcuda.so.1") }.map_err(|e| {
            Error::NoGpu(format!(
                "the CUDA driver (libcuda.so.1) cannot be loaded: {e}"
            ))
        })?;
        let api = Api::load(&lib)?;
        // SAFETY: cuInit takes flags 0; the out-pointers below are valid locals.
        let r = unsafe { (api.init)(0) };
        if r != CUDA_SUCCESS {
            return Err(Error::NoGpu(format!(
                "cuInit failed with {r} ({})",
                api.name_of(r)
            )));
        }
        // SAFETY (the calls up to the context): cuInit succeeded, every pointer is a valid
        // local of the type the driver writes, `dev` comes from cuDeviceGet.
        let mut count = 0;
        api.check("cuDeviceGetCount", unsafe {
            (api.device_count)(&mut count)
        })?;
        if count < 1 {
            return Err(Error::NoGpu("the CUDA driver sees no device".into()));
        }
        let mut dev = 0;
        api.check("cuDeviceGet", unsafe { (api.device_get)(&mut dev, 0) })?;
        let mut buf = [0 as c_char; 256];
        api.check("cuDeviceGetName", unsafe {
            (api.device_name)(buf.as_mut_ptr(), buf.len() as c_int, dev)
        })?;
        // SAFETY: cuDeviceGetName NUL-terminates within the buffer length it was given.
        let name = unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let (mut major, mut minor, mut version) = (0, 0, 0);
        api.check("cuDeviceGetAttribute", unsafe {
            (api.device_attr)(&mut major, ATTR_CC_MAJOR, dev)
        })?;
        api.check("cuDeviceGetAttribute", unsafe {
            (api.device_attr)(&mut minor, ATTR_CC_MINOR, dev)
        })?;
        api.check("cuDriverGetVersion", unsafe {
            (api.driver_version)(&mut version)
        })?;
        let mut ctx: CuContext = std::ptr::null_mut();
        api.check("cuCtxCreate", unsafe { (api.ctx_create)(&mut ctx, 0, dev) })?;
        Ok(Gpu {
            api,
            ctx,
            name,
            capability: (major, minor),
            driver_version: version,
            _lib: lib,
        })
    }

    /// Load a PTX module (JIT-compiled by the driver for this GPU).
    pub fn load_ptx(&self, ptx: &str) -> Result<Module<'_>> {
        let text = CString::new(ptx).map_err(|_| Error::Driver {
            call: "cuModuleLoadData",
            code: -1,
            name: "PTX holds a NUL byte".into(),
        })?;
        let mut m: CuModule = std::ptr::null_mut();
        // SAFETY: the context is current (created on this thread); `text` is NUL-terminated.
        self.api.check("cuModuleLoadData", unsafe {
            (self.api.module_load)(&mut m, text.as_ptr().cast())
        })?;
        Ok(Module { gpu: self, raw: m })
    }

    /// A device buffer holding a copy of `data`.
    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<Buffer<'_>> {
        let bytes = std::mem::size_of_val(data);
        let b = self.alloc(bytes)?;
        // SAFETY: `b` has `bytes` bytes; `data` is `bytes` bytes of plain values.
        self.api.check("cuMemcpyHtoD", unsafe {
            (self.api.htod)(b.ptr, data.as_ptr().cast(), bytes)
        })?;
        Ok(b)
    }

    /// An uninitialised device buffer of `bytes` bytes (at least 1).
    pub fn alloc(&self, bytes: usize) -> Result<Buffer<'_>> {
        let mut ptr = 0;
        // SAFETY: valid out-pointer; the context is current.
        self.api.check("cuMemAlloc", unsafe {
            (self.api.mem_alloc)(&mut ptr, bytes.max(1))
        })?;
        Ok(Buffer {
            gpu: self,
            ptr,
            bytes,
        })
    }

    /// Wait for every launched kernel.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: no arguments; the context is current.
        self.api
            .check("cuCtxSynchronize", unsafe { (self.api.ctx_sync)() })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: the context was created by `open` and every module and buffer borrowing
        // this Gpu is gone.
        unsafe { (self.api.ctx_destroy)(self.ctx) };
    }
}

impl Api {
    fn load(lib: &libloading::Library) -> Result<Api> {
        fn get<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T> {
            // SAFETY: every name below is a driver entry point with the signature its field
            // declares (cuda.h, CUDA 11); the copied pointer stays valid while `lib`, owned by
            // the Gpu beside it, is open.
            unsafe { lib.get::<T>(name.as_bytes()) }
                .map(|s| *s)
                .map_err(|e| Error::NoGpu(format!("the CUDA driver has no `{name}`: {e}")))
        }
        Ok(Api {
            init: get(lib, "cuInit")?,
            driver_version: get(lib, "cuDriverGetVersion")?,
            device_count: get(lib, "cuDeviceGetCount")?,
            device_get: get(lib, "cuDeviceGet")?,
            device_name: get(lib, "cuDeviceGetName")?,
            device_attr: get(lib, "cuDeviceGetAttribute")?,
            ctx_create: get(lib, "cuCtxCreate_v2")?,
            ctx_destroy: get(lib, "cuCtxDestroy_v2")?,
            ctx_sync: get(lib, "cuCtxSynchronize")?,
            module_load: get(lib, "cuModuleLoadData")?,
            module_unload: get(lib, "cuModuleUnload")?,
            module_function: get(lib, "cuModuleGetFunction")?,
            mem_alloc: get(lib, "cuMemAlloc_v2")?,
            mem_free: get(lib, "cuMemFree_v2")?,
            htod: get(lib, "cuMemcpyHtoD_v2")?,
            dtoh: get(lib, "cuMemcpyDtoH_v2")?,
            launch: get(lib, "cuLaunchKernel")?,
            error_name: get(lib, "cuGetErrorName")?,
        })
    }

    fn name_of(&self, code: CuResult) -> String {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; the driver returns a static string or fails.
        if unsafe { (self.error_name)(code, &mut p) } != CUDA_SUCCESS || p.is_null() {
            return "unknown error".into();
        }
        // SAFETY: a non-null static NUL-terminated string from the driver.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn check(&self, call: &'static str, code: CuResult) -> Result<()> {
        if code == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(Error::Driver {
                call,
                code,
                name: self.name_of(code),
            })
        }
    }
}

/// A loaded PTX module.
pub struct Module<'g> {
    gpu: &'g Gpu,
    raw: CuModule,
}

impl Module<'_> {
    /// Launch the kernel `name` on a `grid` of `block`-thread blocks with `args` (in the
    /// kernel's parameter order, each of the parameter's type), and wait for it.
    pub fn launch(&self, name: &str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        let api = &self.gpu.api;
        let c_name = CString::new(name).map_err(|_| Error::Driver {
            call: "cuModuleGetFunction",
            code: -1,
            name: format!("kernel name `{name}` holds a NUL byte"),
        })?;
        let mut f: CuFunction = std::ptr::null_mut();
        // SAFETY: live module, NUL-terminated name, valid out-pointer.
        api.check("cuModuleGetFunction", unsafe {
            (api.module_function)(&mut f, self.raw, c_name.as_ptr())
        })?;
        // The driver reads each parameter through a pointer to its value.
        let mut values: Vec<Arg> = args.to_vec();
        let mut ptrs: Vec<*mut c_void> = values
            .iter_mut()
            .map(|a| match a {
                Arg::Ptr(p) => (p as *mut u64).cast(),
                Arg::I32(v) => (v as *mut i32).cast(),
                Arg::U32(v) => (v as *mut u32).cast(),
                Arg::F64(v) => (v as *mut f64).cast(),
            })
            .collect();
        // SAFETY: `ptrs` holds one pointer per kernel parameter, each to a live value in
        // `values` of the parameter's type (the harness passes them in the kernel's order);
        // default stream, no extra options.
        api.check("cuLaunchKernel", unsafe {
            (api.launch)(
                f,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                std::ptr::null_mut(),
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })?;
        self.gpu.synchronize()
    }
}

/// A kernel argument.
#[derive(Debug, Clone, Copy)]
pub enum Arg {
    /// A device pointer ([`Buffer::ptr`]).
    Ptr(u64),
    /// `int`.
    I32(i32),
    /// `unsigned int`.
    U32(u32),
    /// `double`.
    F64(f64),
}

impl Drop for Module<'_> {
    fn drop(&mut self) {
        // SAFETY: loaded by `load_ptx`, unloaded once.
        unsafe { (self.gpu.api.module_unload)(self.raw) };
    }
}

/// Device memory, freed on drop.
pub struct Buffer<'g> {
    gpu: &'g Gpu,
    /// The device address (what a kernel parameter holds).
    pub ptr: u64,
    bytes: usize,
}

impl Buffer<'_> {
    /// Copy the buffer back as `n` values of `T` (`n · size_of T` must equal its size).
    pub fn download<T: Copy + Default>(&self, n: usize) -> Result<Vec<T>> {
        let bytes = n.saturating_mul(std::mem::size_of::<T>());
        if bytes != self.bytes {
            return Err(Error::Driver {
                call: "cuMemcpyDtoH",
                code: -1,
                name: format!("{bytes} bytes asked of a {}-byte buffer", self.bytes),
            });
        }
        let mut out = vec![T::default(); n];
        // SAFETY: `out` has exactly the buffer's `bytes` bytes; T is plain data.
        self.gpu.api.check("cuMemcpyDtoH", unsafe {
            (self.gpu.api.dtoh)(out.as_mut_ptr().cast(), self.ptr, bytes)
        })?;
        Ok(out)
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc`, freed once.
        unsafe { (self.gpu.api.mem_free)(self.ptr) };
    }
}
