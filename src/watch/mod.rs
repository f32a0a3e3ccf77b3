//! Step 02: list, then watch. (Being built: framing, decoding and `list_then_watch` land here.)

pub mod event;
pub mod frame;

/// What `list_then_watch` hands to its consumer: one change to one object.
///
/// After a relist (a 410, or an oversize event) the consumer is told what changed while the watch
/// was away, in these same terms: `Added` for objects it has not seen, `Modified` for objects whose
/// resourceVersion moved, `Deleted` (with the last state it was given) for objects that vanished.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<T> {
    Added(T),
    Modified(T),
    Deleted(T),
}
