//! ClusterIP allocation, as kube-apiserver's Service IP allocator does it: every Service with a
//! ClusterIP has its own address from the Service range; a requested `spec.clusterIP` is honoured
//! if it is free and in range; `None` (headless) takes none; an address is free again once its
//! Service is deleted.
//!
//! WORKSHOP.md, "Set-up: the sandbox". The range is `10.96.0.0/16` (kind's default
//! `serviceSubnet`) when pods are simulated, and `127.B.192.0/18` when they run as
//! processes, where the proxy really listens on each ClusterIP (`runtime/services.rs`). The
//! addresses in use are read from the stored Services at each create, so nothing has to be
//! released by hand and nothing can drift from what is stored.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// Where ClusterIPs come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServiceRange {
    /// `10.96.0.0/16`: addresses nothing listens on (simulated pods).
    Simulated,
    /// `127.B.192.0/18`: loopback addresses the process runtime's proxy listens on.
    Loopback(u8),
}

/// Why no address could be given, in kube-apiserver's words.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AllocationError {
    NotAnAddress(String),
    NotInRange {
        ip: Ipv4Addr,
        range: String,
    },
    AlreadyAllocated(Ipv4Addr),
    /// Every address of the range is taken (a 500 in kube-apiserver).
    Full,
}

impl std::fmt::Display for AllocationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocationError::NotAnAddress(text) => {
                write!(f, "must be a valid IP address, (e.g. 10.9.8.7): {text:?}")
            }
            AllocationError::NotInRange { ip, range } => write!(
                f,
                "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {range}"
            ),
            AllocationError::AlreadyAllocated(ip) => {
                write!(f, "failed to allocate IP {ip}: provided IP is already allocated")
            }
            AllocationError::Full => write!(f, "failed to allocate a serviceIP: range is full"),
        }
    }
}

impl std::error::Error for AllocationError {}

impl ServiceRange {
    /// The first address and how many there are (network and broadcast addresses excluded, as
    /// kube-apiserver excludes them).
    fn bounds(self) -> (u32, u32) {
        match self {
            ServiceRange::Simulated => (u32::from(Ipv4Addr::new(10, 96, 0, 0)) + 1, (1 << 16) - 2),
            ServiceRange::Loopback(block) => (
                u32::from(Ipv4Addr::new(127, block, 192, 0)) + 1,
                (1 << 14) - 2,
            ),
        }
    }

    /// `10.96.0.0/16` or `127.B.192.0/18`.
    pub(crate) fn cidr(self) -> String {
        match self {
            ServiceRange::Simulated => "10.96.0.0/16".to_string(),
            ServiceRange::Loopback(block) => format!("127.{block}.192.0/18"),
        }
    }

    pub(crate) fn contains(self, ip: Ipv4Addr) -> bool {
        let (first, count) = self.bounds();
        (first..first + count).contains(&u32::from(ip))
    }

    /// The address for a new Service: `requested` if given (and free, and in range), else the
    /// first free one at or after the `start`-th (wrapping round), as kube-apiserver's
    /// allocator scans from a random offset.
    pub(crate) fn allocate(
        self,
        requested: Option<&str>,
        used: &BTreeSet<Ipv4Addr>,
        start: u64,
    ) -> Result<Ipv4Addr, AllocationError> {
        if let Some(text) = requested {
            let ip: Ipv4Addr = text
                .parse()
                .map_err(|_| AllocationError::NotAnAddress(text.to_string()))?;
            if !self.contains(ip) {
                return Err(AllocationError::NotInRange {
                    ip,
                    range: self.cidr(),
                });
            }
            if used.contains(&ip) {
                return Err(AllocationError::AlreadyAllocated(ip));
            }
            return Ok(ip);
        }
        let (first, count) = self.bounds();
        let offset = (start % u64::from(count)) as u32;
        (0..count)
            .map(|step| Ipv4Addr::from(first + (offset + step) % count))
            .find(|ip| !used.contains(ip))
            .ok_or(AllocationError::Full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_unique_in_range_and_a_taken_request_is_refused() {
        let range = ServiceRange::Loopback(42);
        let mut used = BTreeSet::new();
        let first = range.allocate(None, &used, 0).expect("an address");
        assert_eq!(first, Ipv4Addr::new(127, 42, 192, 1));
        used.insert(first);
        assert_eq!(
            range.allocate(None, &used, 0),
            Ok(Ipv4Addr::new(127, 42, 192, 2))
        );
        // From the last address the scan wraps round to the first free one.
        let last = range.allocate(None, &used, u64::from((1u32 << 14) - 3));
        assert_eq!(last, Ok(Ipv4Addr::new(127, 42, 255, 254)));
        used.insert(Ipv4Addr::new(127, 42, 255, 254));
        let wrapped = range.allocate(None, &used, u64::from((1u32 << 14) - 3));
        assert_eq!(wrapped, Ok(Ipv4Addr::new(127, 42, 192, 2)));

        assert_eq!(
            range.allocate(Some("127.42.200.7"), &used, 0),
            Ok(Ipv4Addr::new(127, 42, 200, 7))
        );
        assert_eq!(
            range
                .allocate(Some("127.42.192.1"), &used, 0)
                .map_err(|e| e.to_string()),
            Err("failed to allocate IP 127.42.192.1: provided IP is already allocated".into())
        );
        assert_eq!(
            range
                .allocate(Some("10.96.0.10"), &used, 0)
                .map_err(|e| e.to_string()),
            Err("failed to allocate IP 10.96.0.10: the provided IP (10.96.0.10) is not in the valid range. The range of valid IPs is 127.42.192.0/18".into())
        );
        assert!(ServiceRange::Simulated.contains(Ipv4Addr::new(10, 96, 255, 254)));
        assert!(!ServiceRange::Simulated.contains(Ipv4Addr::new(10, 97, 0, 1)));
    }

    #[test]
    fn a_full_range_says_so() {
        let range = ServiceRange::Loopback(7);
        let used: BTreeSet<Ipv4Addr> = (0..(1u32 << 14) - 2)
            .map(|i| Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 7, 192, 1)) + i))
            .collect();
        assert_eq!(range.allocate(None, &used, 99), Err(AllocationError::Full));
    }
}
