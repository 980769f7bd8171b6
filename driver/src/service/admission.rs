//! Admission: which connections the service keeps, so that no client can lock the others
//! out by connecting and then doing nothing.
//!
//! A connection is first *unauthenticated*: it has [`AdmissionLimits::hello_timeout`] to
//! complete its handshake, and it lives in a pool of its own (bounded in all and per user)
//! that never counts against the cap authenticated clients need. When that pool is full,
//! the oldest unauthenticated connection (of the same user, when that user's share is the
//! one full) is closed to make room: a real client completes its hello within
//! milliseconds, so only a connection that sits silent loses its place.
//!
//! An authenticated connection counts against [`AdmissionLimits::connections`] and its
//! user's [`AdmissionLimits::per_uid`]. At a full cap, a connection that owns nothing, has
//! nothing in flight and has not called for [`AdmissionLimits::idle_after`] is closed to
//! make room (the longest idle first); only when there is none is the newcomer refused.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::transport;

/// The bounds on connections.
#[derive(Clone, Debug)]
pub struct AdmissionLimits {
    /// How long a new connection may take to complete its handshake before it is closed.
    pub hello_timeout: Duration,
    /// Unauthenticated connections kept at once (beyond it the oldest is closed).
    pub handshaking: usize,
    /// Unauthenticated connections of one user kept at once.
    pub handshaking_per_uid: usize,
    /// Authenticated connections at once.
    pub connections: usize,
    /// Authenticated connections of one user at once.
    pub per_uid: usize,
    /// How long a connection that owns nothing must have been silent to be closed for a
    /// newcomer when a cap is full.
    pub idle_after: Duration,
}

impl Default for AdmissionLimits {
    fn default() -> Self {
        AdmissionLimits {
            hello_timeout: Duration::from_secs(2),
            handshaking: 64,
            handshaking_per_uid: 16,
            connections: 256,
            per_uid: 64,
            idle_after: Duration::from_secs(5),
        }
    }
}

/// Tells whether an authenticated connection is idle: `Some(since)` when it owns nothing,
/// has nothing in flight and has been silent since then.
pub trait Idle: Send + Sync {
    /// When it became idle, or `None` while it is busy or owns something.
    fn idle_since(&self) -> Option<Instant>;
}

enum Stage {
    Hello,
    Serving(Arc<dyn Idle>),
}

struct Entry {
    uid: u32,
    sock: Arc<OwnedFd>,
    since: Instant,
    stage: Stage,
}

/// The service's connections, by admission ticket.
pub struct Admission {
    limits: AdmissionLimits,
    entries: Mutex<(u64, HashMap<u64, Entry>)>,
}

/// One connection's place; dropping it frees the place.
pub struct Ticket {
    admission: Arc<Admission>,
    id: u64,
}

impl Admission {
    /// An empty registry with `limits`.
    pub fn new(limits: AdmissionLimits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            entries: Mutex::new((0, HashMap::new())),
        })
    }

    /// The bounds in force.
    pub fn limits(&self) -> &AdmissionLimits {
        &self.limits
    }

    fn lock(&self) -> MutexGuard<'_, (u64, HashMap<u64, Entry>)> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Authenticated connections now.
    pub fn serving(&self) -> usize {
        let g = self.lock();
        g.1.values()
            .filter(|e| matches!(e.stage, Stage::Serving(_)))
            .count()
    }

    /// A new, unauthenticated connection of user `uid`: always taken, closing the oldest
    /// unauthenticated one (of this user when its share is full) if the pool is full.
    pub fn hello(self: &Arc<Self>, uid: u32, sock: Arc<OwnedFd>) -> Ticket {
        let mut g = self.lock();
        let (next, entries) = &mut *g;
        let waiting = |entries: &HashMap<u64, Entry>, only: Option<u32>| {
            entries
                .iter()
                .filter(|(_, e)| matches!(e.stage, Stage::Hello))
                .filter(|(_, e)| only.is_none_or(|u| e.uid == u))
                .map(|(&id, e)| (id, e.since))
                .collect::<Vec<_>>()
        };
        for (only, cap) in [
            (Some(uid), self.limits.handshaking_per_uid),
            (None, self.limits.handshaking),
        ] {
            let w = waiting(entries, only);
            if w.len() >= cap.max(1) {
                if let Some((oldest, _)) = w.iter().min_by_key(|(_, since)| *since) {
                    if let Some(e) = entries.remove(oldest) {
                        tracing::warn!(
                            "closing a connection of uid {} that sent no hello to make room",
                            e.uid
                        );
                        transport::shutdown(e.sock.as_fd());
                    }
                }
            }
        }
        *next += 1;
        let id = *next;
        entries.insert(
            id,
            Entry {
                uid,
                sock,
                since: Instant::now(),
                stage: Stage::Hello,
            },
        );
        Ticket {
            admission: self.clone(),
            id,
        }
    }
}

impl Ticket {
    /// The connection completed its handshake: it now counts against the caps, making
    /// room by closing an idle connection if one is full. `Err` (why) when there is no
    /// room; the connection must then be closed.
    pub fn authenticate(&self, idle: Arc<dyn Idle>) -> Result<(), String> {
        let limits = &self.admission.limits;
        let mut g = self.admission.lock();
        let entries = &mut g.1;
        let Some(uid) = entries.get(&self.id).map(|e| e.uid) else {
            return Err("the connection was closed to make room".into());
        };
        let now = Instant::now();
        for (only, cap) in [(Some(uid), limits.per_uid), (None, limits.connections)] {
            let serving: Vec<(u64, Option<Instant>)> = entries
                .iter()
                .filter(|(_, e)| only.is_none_or(|u| e.uid == u))
                .filter_map(|(&id, e)| match &e.stage {
                    Stage::Serving(i) => Some((id, i.idle_since())),
                    Stage::Hello => None,
                })
                .collect();
            if serving.len() < cap {
                continue;
            }
            let victim = serving
                .iter()
                .filter_map(|&(id, since)| since.map(|s| (id, s)))
                .filter(|&(_, since)| now.saturating_duration_since(since) >= limits.idle_after)
                .min_by_key(|&(_, since)| since);
            match victim.and_then(|(id, _)| entries.remove(&id)) {
                Some(e) => {
                    tracing::warn!("closing an idle connection of uid {} to make room", e.uid);
                    transport::shutdown(e.sock.as_fd());
                }
                None => {
                    return Err(match only {
                        Some(u) => format!("user {u} has {} connections already", serving.len()),
                        None => format!("{} clients connected already", serving.len()),
                    })
                }
            }
        }
        if let Some(e) = entries.get_mut(&self.id) {
            e.stage = Stage::Serving(idle);
        }
        Ok(())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.lock().1.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Option<Instant>);
    impl Idle for Fixed {
        fn idle_since(&self) -> Option<Instant> {
            self.0
        }
    }

    fn sock() -> (Arc<OwnedFd>, OwnedFd) {
        let (a, b) = transport::pair().unwrap();
        (Arc::new(a), b)
    }

    /// The peer's end sees the connection closed.
    fn closed(peer: &OwnedFd) -> bool {
        let tv = nix::sys::time::TimeVal::new(0, 1000);
        nix::sys::socket::setsockopt(peer, nix::sys::socket::sockopt::ReceiveTimeout, &tv).unwrap();
        matches!(
            transport::recv(peer.as_fd()),
            Err(transport::TransportError::Closed)
        )
    }

    #[test]
    fn silent_connections_make_room_oldest_first() {
        let a = Admission::new(AdmissionLimits {
            handshaking: 2,
            handshaking_per_uid: 2,
            ..AdmissionLimits::default()
        });
        let (s1, p1) = sock();
        let (s2, p2) = sock();
        let (s3, p3) = sock();
        let _t1 = a.hello(1, s1);
        let _t2 = a.hello(1, s2);
        let t3 = a.hello(1, s3);
        assert!(closed(&p1), "the oldest silent connection made room");
        assert!(!closed(&p2) && !closed(&p3));
        assert!(t3.authenticate(Arc::new(Fixed(None))).is_ok());
        assert_eq!(a.serving(), 1);
    }

    #[test]
    fn a_full_cap_evicts_only_idle_connections() {
        let a = Admission::new(AdmissionLimits {
            connections: 1,
            per_uid: 1,
            idle_after: Duration::ZERO,
            ..AdmissionLimits::default()
        });
        let (s1, p1) = sock();
        let t1 = a.hello(7, s1);
        t1.authenticate(Arc::new(Fixed(None))).unwrap();
        let (s2, _p2) = sock();
        let t2 = a.hello(7, s2);
        // The first one is busy: no room.
        assert!(t2.authenticate(Arc::new(Fixed(None))).is_err());
        assert!(!closed(&p1), "a busy connection was closed");
        drop(t1);
        let (s3, p3) = sock();
        let t3 = a.hello(8, s3);
        t3.authenticate(Arc::new(Fixed(Some(Instant::now()))))
            .unwrap();
        // The idle one makes room.
        let (s4, _p4) = sock();
        let t4 = a.hello(9, s4);
        assert!(t4.authenticate(Arc::new(Fixed(None))).is_ok());
        assert!(closed(&p3));
        assert_eq!(a.serving(), 1);
    }
}
