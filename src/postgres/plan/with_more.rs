//! Support: skip it on first read — stage 04's members carry nothing more (`Member<()>`); a
//! later step's layer puts its own observation of each member in `more` with this.

use super::Member;

impl<X> Member<X> {
    /// This member with a later step's observation `more`.
    pub fn with<Y>(self, more: Y) -> Member<Y> {
        let Member {
            name,
            role,
            phase,
            ready,
            unready_for,
            version,
            created,
            more: _,
        } = self;
        Member {
            name,
            role,
            phase,
            ready,
            unready_for,
            version,
            created,
            more,
        }
    }
}
