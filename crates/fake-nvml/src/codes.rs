//! NVML return codes, their names in scenario files, and `nvmlErrorString`.

use std::ffi::{CStr, c_char};
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// `nvmlReturn_t`.
pub type Ret = u32;

pub const SUCCESS: Ret = 0;
pub const UNINITIALIZED: Ret = 1;
pub const INVALID_ARGUMENT: Ret = 2;
pub const NOT_SUPPORTED: Ret = 3;
pub const NOT_FOUND: Ret = 6;
pub const INSUFFICIENT_SIZE: Ret = 7;
pub const GPU_IS_LOST: Ret = 15;
pub const ARGUMENT_VERSION_MISMATCH: Ret = 25;
pub const UNKNOWN: Ret = 999;

/// Every code NVML defines: (code, scenario-file name, `nvmlErrorString` text).
const CODES: &[(Ret, &str, &CStr)] = &[
    (0, "success", c"Success"),
    (1, "uninitialized", c"Uninitialized"),
    (2, "invalid_argument", c"Invalid Argument"),
    (3, "not_supported", c"Not Supported"),
    (4, "no_permission", c"Insufficient Permissions"),
    (5, "already_initialized", c"Already Initialized"),
    (6, "not_found", c"Not Found"),
    (7, "insufficient_size", c"Insufficient Size"),
    (8, "insufficient_power", c"Insufficient External Power"),
    (9, "driver_not_loaded", c"Driver Not Loaded"),
    (10, "timeout", c"Timeout"),
    (11, "irq_issue", c"Interrupt Request Issue"),
    (12, "library_not_found", c"NVML Shared Library Not Found"),
    (13, "function_not_found", c"Function Not Found"),
    (14, "corrupted_inforom", c"Corrupted infoROM"),
    (15, "gpu_is_lost", c"GPU is lost"),
    (16, "reset_required", c"GPU requires restart"),
    (
        17,
        "operating_system",
        c"The operating system has blocked the request.",
    ),
    (
        18,
        "lib_rm_version_mismatch",
        c"RM has detected an NVML/RM version mismatch.",
    ),
    (19, "in_use", c"In use by another client"),
    (20, "memory", c"Insufficient Memory"),
    (21, "no_data", c"No data"),
    (
        22,
        "vgpu_ecc_not_supported",
        c"The requested vgpu operation is not available on target device, because ECC is enabled",
    ),
    (
        23,
        "insufficient_resources",
        c"Ran out of critical resources, other than memory",
    ),
    (
        24,
        "freq_not_supported",
        c"The requested frequency is not supported",
    ),
    (
        25,
        "argument_version_mismatch",
        c"The provided version is invalid/unsupported",
    ),
    (
        26,
        "deprecated",
        c"The requested functionality has been deprecated",
    ),
    (27, "not_ready", c"The system is not ready for the request"),
    (28, "gpu_not_found", c"The GPU was not found"),
    (29, "invalid_state", c"The GPU is in an invalid state"),
    (
        30,
        "reset_type_not_supported",
        c"The reset type is not supported",
    ),
    (999, "unknown", c"Unknown Error"),
];

/// Extra spellings accepted in scenario files.
const ALIASES: &[(&str, Ret)] = &[("gpu_lost", GPU_IS_LOST), ("invalid_arg", INVALID_ARGUMENT)];

fn code_by_name(name: &str) -> Option<Ret> {
    let name = name.trim().to_ascii_lowercase();
    let name = name.strip_prefix("nvml_error_").unwrap_or(&name);
    CODES
        .iter()
        .find(|(_, n, _)| *n == name)
        .map(|(c, _, _)| *c)
        .or_else(|| ALIASES.iter().find(|(n, _)| *n == name).map(|(_, c)| *c))
}

/// An error code in a scenario file: a name such as `"driver_not_loaded"` or an integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub Ret);

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ErrorCode;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an NVML error name (e.g. \"driver_not_loaded\") or an integer code")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ErrorCode, E> {
                u32::try_from(v)
                    .map(ErrorCode)
                    .map_err(|_| E::custom(format!("error code {v} out of range")))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ErrorCode, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom(format!("negative error code {v}")))
                    .and_then(|v| self.visit_u64(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ErrorCode, E> {
                code_by_name(v)
                    .map(ErrorCode)
                    .ok_or_else(|| E::custom(format!("unknown NVML error name {v:?}")))
            }
        }
        d.deserialize_any(V)
    }
}

/// `const char* nvmlErrorString(nvmlReturn_t result)`: static strings, never null.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: Ret) -> *const c_char {
    CODES
        .iter()
        .find(|(c, _, _)| *c == result)
        .map_or(c"Unknown Error", |(_, _, s)| *s)
        .as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve() {
        assert_eq!(code_by_name("driver_not_loaded"), Some(9));
        assert_eq!(code_by_name("NVML_ERROR_GPU_IS_LOST"), Some(15));
        assert_eq!(code_by_name("gpu_lost"), Some(15));
        assert_eq!(code_by_name("bogus"), None);
    }
}
