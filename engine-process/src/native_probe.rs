//! The test-only native attack probe (`native/attack_probe.cc`, compiled only with the `test-hooks`
//! feature): what native code that took over an engine process would try, run from inside a real,
//! sandboxed engine process of either engine, so that the tests of the walls can check that each
//! attempt fails. Nothing of it is in a shipped binary.
//!
//! Ownership: the probe borrows the two NUL-terminated strings for the call and writes a
//! NUL-terminated report into the buffer it is given, within its length; it keeps nothing.

use crate::child::NativeProbe;

/// The probe, in builds with the `test-hooks` feature; `None` otherwise. An engine host hands it
/// to [`crate::child::serve_with_probe`].
pub const NATIVE_ATTACK_PROBE: Option<NativeProbe> = {
    #[cfg(feature = "test-hooks")]
    {
        Some(attack_probe)
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        None
    }
};

#[cfg(feature = "test-hooks")]
unsafe extern "C" {
    fn cm_attack_probe(
        attack: *const std::ffi::c_char,
        target: *const std::ffi::c_char,
        detail: *mut std::ffi::c_char,
        detail_len: usize,
    ) -> i32;
}

/// Runs one test-only native attack (see `native/attack_probe.cc`) against `target`: `Ok(what
/// happened)` if it succeeded, `Err(why not)` if it was refused.
#[cfg(feature = "test-hooks")]
fn attack_probe(attack: &str, target: &str) -> Result<String, String> {
    let (Ok(attack), Ok(target)) = (
        std::ffi::CString::new(attack),
        std::ffi::CString::new(target),
    ) else {
        return Err("a name with a NUL byte".to_owned());
    };
    let mut detail = vec![0u8; 512];
    // SAFETY: both strings are NUL-terminated and live across the call; `detail` is a writable
    // buffer of the length passed, which the probe NUL-terminates within it.
    let allowed = unsafe {
        cm_attack_probe(
            attack.as_ptr(),
            target.as_ptr(),
            detail.as_mut_ptr().cast(),
            detail.len(),
        )
    };
    let end = detail
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(detail.len());
    let detail = String::from_utf8_lossy(&detail[..end]).into_owned();
    if allowed == 1 {
        Ok(detail)
    } else {
        Err(detail)
    }
}
