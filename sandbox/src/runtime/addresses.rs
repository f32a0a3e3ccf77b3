//! Pod IPs on the loopback network: every address in 127.0.0.0/8 reaches this machine on Linux
//! with no set-up, so each pod gets its own `127.B.x.y` and its processes listen there — two
//! postgres pods both use port 5432, as in a cluster.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Each sandbox takes one /16 (`127.B.0.0/16`, B picked at
//! random from 16..=250 unless given), so two sandboxes on one machine (parallel tests) almost
//! never share an address; 127.0.0.0/16, where 127.0.0.1 and the usual test addresses live, is
//! never used. Addresses are handed out in order and reused only after the whole /16 went round,
//! so a new pod never meets the TIME_WAIT sockets of the pod that had its address before.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// Hands out `127.B.x.y` addresses, x.y from 0.2 to 191.254; `127.B.192.0/18` above them is
/// the Services' (`services.rs`).
#[derive(Debug)]
pub(crate) struct PodAddresses {
    block: u8,
    next: u32,
    in_use: BTreeSet<u32>,
}

/// x.y as one number: 0.2 is the first, 191.254 the last (no .0, .1 or .255 host parts).
const FIRST: u32 = 2;
const LAST: u32 = 191 * 256 + 254;

impl PodAddresses {
    pub(crate) fn new(block: u8) -> PodAddresses {
        PodAddresses {
            block,
            next: FIRST,
            in_use: BTreeSet::new(),
        }
    }

    /// The pods' range, for the banner.
    pub(crate) fn range(&self) -> String {
        format!("127.{}.0.0-127.{0}.191.255", self.block)
    }

    /// B of `127.B.0.0/16`.
    pub(crate) fn block(&self) -> u8 {
        self.block
    }

    /// The next free address, or None when all 65 000 are taken.
    pub(crate) fn allocate(&mut self) -> Option<Ipv4Addr> {
        for _ in FIRST..=LAST {
            let candidate = self.next;
            self.next = if self.next >= LAST {
                FIRST
            } else {
                self.next + 1
            };
            let host = (candidate & 0xff) as u8;
            if host == 0 || host == 1 || host == 255 || self.in_use.contains(&candidate) {
                continue;
            }
            self.in_use.insert(candidate);
            return Some(Ipv4Addr::new(127, self.block, (candidate >> 8) as u8, host));
        }
        None
    }

    pub(crate) fn release(&mut self, address: Ipv4Addr) {
        let [_, _, x, y] = address.octets();
        self.in_use.remove(&(u32::from(x) << 8 | u32::from(y)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_in_order_skip_reserved_host_parts_and_are_not_reused_at_once() {
        let mut addresses = PodAddresses::new(42);
        let first = addresses.allocate();
        assert_eq!(first, Some(Ipv4Addr::new(127, 42, 0, 2)));
        addresses.release(Ipv4Addr::new(127, 42, 0, 2));
        assert_eq!(addresses.allocate(), Some(Ipv4Addr::new(127, 42, 0, 3)));
        addresses.next = 254;
        assert_eq!(addresses.allocate(), Some(Ipv4Addr::new(127, 42, 0, 254)));
        assert_eq!(addresses.allocate(), Some(Ipv4Addr::new(127, 42, 1, 2)));
        assert_eq!(addresses.range(), "127.42.0.0-127.42.191.255");
    }
}
