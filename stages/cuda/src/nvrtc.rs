//! NVRTC, the CUDA runtime compiler, through its C API (`libnvrtc.so`, opened at run time):
//! CUDA C++ source in, PTX out.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;

use crate::error::{Error, Result};

type Program = *mut c_void;

/// An opened NVRTC library.
pub struct Nvrtc {
    lib: libloading::Library,
}

/// `nvrtcResult` 0.
const NVRTC_SUCCESS: c_int = 0;

impl Nvrtc {
    /// Open `libnvrtc.so` at `path`.
    pub fn open(path: &Path) -> Result<Nvrtc> {
        // SAFETY: loading NVRTC runs its initialisers, which have no preconditions; the
        // library is the one the pinned CUDA package ships.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| Error::Toolchain(format!("cannot load `{}`: {e}", path.display())))?;
        Ok(Nvrtc { lib })
    }

    fn sym<T>(&self, name: &str) -> Result<libloading::Symbol<'_, T>> {
        // SAFETY: every caller names an NVRTC entry point with the type its header declares.
        unsafe { self.lib.get::<T>(name.as_bytes()) }
            .map_err(|e| Error::Toolchain(format!("NVRTC has no `{name}`: {e}")))
    }

    /// `(major, minor)` of the NVRTC release.
    pub fn version(&self) -> Result<(i32, i32)> {
        let f =
            self.sym::<unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int>("nvrtcVersion")?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers, as nvrtcVersion requires.
        let r = unsafe { f(&mut major, &mut minor) };
        if r != NVRTC_SUCCESS {
            return Err(Error::Toolchain(format!("nvrtcVersion failed ({r})")));
        }
        Ok((major, minor))
    }

    /// Compile `src` (named `name` in messages and in the PTX line table) to PTX for the
    /// virtual architecture `arch`, with line information (so `ptxas` errors can be traced
    /// back to the source). An error of the source is [`Error::Compile`] at its first
    /// `error` line.
    pub fn compile(&self, name: &str, src: &str, arch: &'static str) -> Result<String> {
        type Create = unsafe extern "C" fn(
            *mut Program,
            *const c_char,
            *const c_char,
            c_int,
            *const *const c_char,
            *const *const c_char,
        ) -> c_int;
        type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
        type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> c_int;
        type GetFn = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
        type Destroy = unsafe extern "C" fn(*mut Program) -> c_int;
        let create = *self.sym::<Create>("nvrtcCreateProgram")?;
        let compile = *self.sym::<CompileFn>("nvrtcCompileProgram")?;
        let log_size = *self.sym::<SizeFn>("nvrtcGetProgramLogSize")?;
        let get_log = *self.sym::<GetFn>("nvrtcGetProgramLog")?;
        let ptx_size = *self.sym::<SizeFn>("nvrtcGetPTXSize")?;
        let get_ptx = *self.sym::<GetFn>("nvrtcGetPTX")?;
        let destroy = *self.sym::<Destroy>("nvrtcDestroyProgram")?;

        let nul = |what: &str, s: &str| {
            CString::new(s)
                .map_err(|_| Error::Toolchain(format!("{what} `{name}` holds a NUL byte")))
        };
        let c_src = nul("source", src)?;
        let c_name = nul("name", name)?;
        let options = [
            format!("--gpu-architecture={arch}"),
            "--generate-line-info".into(),
        ];
        let c_opts: Vec<CString> = options
            .iter()
            .map(|o| nul("option", o))
            .collect::<Result<_>>()?;
        let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();

        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: valid out-pointer, NUL-terminated source and name, no headers.
        let r = unsafe {
            create(
                &mut prog,
                c_src.as_ptr(),
                c_name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if r != NVRTC_SUCCESS {
            return Err(Error::Toolchain(format!("nvrtcCreateProgram failed ({r})")));
        }
        // Read a size-then-bytes NVRTC string.
        let read = |size: SizeFn, get: GetFn| -> Option<String> {
            let mut n = 0usize;
            // SAFETY: `prog` is a live program; valid out-pointer.
            if unsafe { size(prog, &mut n) } != NVRTC_SUCCESS {
                return None;
            }
            let mut buf = vec![0u8; n.max(1)];
            // SAFETY: `buf` holds the `n` bytes (with the NUL) NVRTC said it needs.
            if unsafe { get(prog, buf.as_mut_ptr().cast()) } != NVRTC_SUCCESS {
                return None;
            }
            let s = CStr::from_bytes_until_nul(&buf).ok()?;
            Some(s.to_string_lossy().into_owned())
        };
        // SAFETY: live program, option pointers valid for the call.
        let r = unsafe { compile(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
        let log = read(log_size, get_log).unwrap_or_default();
        let ptx = if r == NVRTC_SUCCESS {
            read(ptx_size, get_ptx)
        } else {
            None
        };
        // SAFETY: `prog` was created above and is destroyed once.
        unsafe { destroy(&mut prog) };
        if r != NVRTC_SUCCESS {
            return Err(
                first_error(name, &log, arch).unwrap_or_else(|| Error::Compile {
                    file: name.to_string(),
                    line: 0,
                    message: format!("NVRTC failed ({r}): {}", log.trim()),
                    stage: "nvrtc",
                    arch,
                }),
            );
        }
        ptx.ok_or_else(|| Error::Toolchain(format!("NVRTC gave no PTX for `{name}`")))
    }
}

/// The first `name(LINE): error: MESSAGE` of an NVRTC log, with the count of further errors.
fn first_error(name: &str, log: &str, arch: &'static str) -> Option<Error> {
    let prefix = format!("{name}(");
    let errors: Vec<(u32, &str)> = log
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(&prefix)?;
            let (line, rest) = rest.split_once("): ")?;
            let msg = rest.strip_prefix("error: ")?;
            Some((line.parse().ok()?, msg))
        })
        .collect();
    let (line, msg) = errors.first()?;
    let more = match errors.len() - 1 {
        0 => String::new(),
        n => format!("; {n} more error(s)"),
    };
    Some(Error::Compile {
        file: name.to_string(),
        line: *line,
        message: format!("{msg}{more}"),
        stage: "nvrtc",
        arch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_error_line_is_located() {
        let log = "k.cu(3): warning: x\nk.cu(16): error: identifier \"__hadd\" is undefined\n\
                   k.cu(20): error: expected a \";\"\n\n2 errors detected\n";
        let e = first_error("k.cu", log, "compute_37").unwrap();
        assert_eq!(
            e.to_string(),
            "k.cu:16: error: identifier \"__hadd\" is undefined; 1 more error(s) (nvrtc, compute_37)"
        );
        assert!(first_error("k.cu", "all good\n", "compute_37").is_none());
    }
}
