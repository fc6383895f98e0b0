//! PCI bus IDs: `DDDDDDDD:BB:DD.F` (NVML's form) and the legacy `DDDD:BB:DD.F`.

use std::fmt;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PciAddress {
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub function: u32,
}

impl PciAddress {
    /// Accepts `[domain:]bus:device[.function]`, hexadecimal, any case.
    pub fn parse(text: &str) -> Option<Self> {
        let parts: Vec<&str> = text.trim().split(':').collect();
        let (domain, bus, rest) = match parts.as_slice() {
            [d, b, r] => (u32::from_str_radix(d, 16).ok()?, *b, *r),
            [b, r] => (0, *b, *r),
            _ => return None,
        };
        let (device, function) = match rest.split_once('.') {
            Some((d, f)) => (d, u32::from_str_radix(f, 16).ok()?),
            None => (rest, 0),
        };
        let addr = Self {
            domain,
            bus: u32::from_str_radix(bus, 16).ok()?,
            device: u32::from_str_radix(device, 16).ok()?,
            function,
        };
        (addr.bus <= 0xff && addr.device <= 0x1f && addr.function <= 7).then_some(addr)
    }

    /// The 16-byte legacy form, `0000:17:00.0`.
    pub fn legacy(&self) -> String {
        format!(
            "{:04X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{:08X}:{:02X}:{:02X}.{:X}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        let a = PciAddress::parse("00000000:17:00.0").unwrap();
        assert_eq!(
            a,
            PciAddress {
                domain: 0,
                bus: 0x17,
                device: 0,
                function: 0
            }
        );
        assert_eq!(PciAddress::parse("0000:17:00.0"), Some(a));
        assert_eq!(PciAddress::parse("17:00.0"), Some(a));
        assert_eq!(a.to_string(), "00000000:17:00.0");
        assert_eq!(a.legacy(), "0000:17:00.0");
        assert_eq!(PciAddress::parse("zz:00.0"), None);
        assert_eq!(PciAddress::parse("0000:100:00.0"), None);
    }
}
