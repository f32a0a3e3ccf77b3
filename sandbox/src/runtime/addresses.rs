//! Pod IPs on the loopback network: every address in 127.0.0.0/8 reaches this machine on Linux
//! with no set-up, so each pod gets its own `127.B.x.y` and its processes listen there — two
//! postgres pods both use port 5432, as in a cluster.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Each sandbox takes one /16 (`127.B.0.0/16`, B from
//! 16..=250) and claims it for its life ([`BlockClaim`]), so two sandboxes on one machine
//! (parallel tests, other checkouts) never share an address; 127.0.0.0/16, where 127.0.0.1 and
//! the usual test addresses live, is never used. Addresses are handed out in order and reused
//! only after the whole /16 went round, so a new pod never meets the TIME_WAIT sockets of the pod
//! that had its address before.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};

use crate::random::Xorshift;

/// The blocks a sandbox may take: 127.16.0.0/16 to 127.250.0.0/16.
const BLOCKS: std::ops::RangeInclusive<u8> = 16..=250;

/// The port of the claim's listener (outside Linux's ephemeral range, 32768 to 60999).
const CLAIM_PORT: u16 = 65535;

/// A sandbox's hold on `127.B.0.0/16`: a listener on `127.B.255.255`, the last address of the
/// Services' /18, which no Service and no pod is ever given. Only one socket may listen there, so
/// a second sandbox that picks the same B finds it taken and picks another; the kernel drops the
/// hold when the process ends, SIGKILL included. Two sandboxes on one block gave two pods the
/// same address: one pod's probes were answered by the other's postgres (Ready during its
/// initdb), and its own postgres then could not bind and exited.
#[derive(Debug)]
pub(crate) struct BlockClaim {
    block: u8,
    /// None: the block was asked for (configured, or kept from a data directory) and is taken.
    listener: Option<TcpListener>,
}

impl BlockClaim {
    /// Claim `wanted` if given, else a free block picked at random. A wanted block that is taken
    /// is used anyway, with a warning: its Services' addresses are already stored.
    pub(crate) fn claim(wanted: Option<u8>, random: &mut Xorshift) -> BlockClaim {
        if let Some(block) = wanted {
            let claim = BlockClaim::try_claim(block);
            if claim.listener.is_none() {
                tracing::warn!(block, "another sandbox on this machine holds 127.{block}.0.0/16: pods may be given addresses its pods have");
            }
            return claim;
        }
        let count = u64::from(BLOCKS.end() - BLOCKS.start()) + 1;
        let start = random.below(count);
        let candidates = (0..count).map(|step| BLOCKS.start() + ((start + step) % count) as u8);
        BlockClaim::first_free(candidates).unwrap_or_else(|| {
            let block = BLOCKS.start() + start as u8;
            tracing::warn!(
                block,
                "every 127.B.0.0/16 block is held by another sandbox on this machine: sharing one"
            );
            BlockClaim {
                block,
                listener: None,
            }
        })
    }

    /// The first of `candidates` no other sandbox holds, claimed.
    fn first_free(candidates: impl Iterator<Item = u8>) -> Option<BlockClaim> {
        candidates
            .map(BlockClaim::try_claim)
            .find(|claim| claim.listener.is_some())
    }

    fn try_claim(block: u8) -> BlockClaim {
        let address = (Ipv4Addr::new(127, block, 255, 255), CLAIM_PORT);
        BlockClaim {
            block,
            listener: TcpListener::bind(address).ok(),
        }
    }

    /// B of `127.B.0.0/16`.
    pub(crate) fn block(&self) -> u8 {
        self.block
    }
}

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
    fn a_claimed_block_is_not_claimed_again() {
        let mut random = Xorshift::from_entropy();
        let held = BlockClaim::claim(None, &mut random);
        assert!(held.listener.is_some(), "a free block on this machine");
        assert!(BlockClaim::try_claim(held.block()).listener.is_none());
        assert!(BlockClaim::first_free([held.block()].into_iter()).is_none());
        let asked = BlockClaim::claim(Some(held.block()), &mut random);
        assert_eq!(
            asked.block(),
            held.block(),
            "an asked-for block is kept, taken or not"
        );
    }

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
