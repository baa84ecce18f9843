//! Where a frontend keeps a cached result's rows as it encoded them for its wire, so that the
//! next hit encoded the same way sends those bytes again instead of converting, printing and
//! encoding the same batches anew (the Postgres wire: `frontend::pg::encoded`).
//!
//! The service never reads what is kept: it is the frontend's own type, with what it was
//! encoded under (formatting options, column types and formats), and the frontend decides
//! whether a hit may take it. Only small results keep an encoding, and the room for it is
//! part of the entry's charge in the cache (`[cache] max_bytes` still bounds the memory).

use std::any::Any;
use std::sync::{Arc, Mutex};

/// Results of at most this many Arrow bytes may keep an encoding of their rows, of at most as
/// many bytes as their Arrow arrays and [`ENCODED_BASE_BYTES`] (charged to the entry up front).
pub const ENCODED_MAX_BYTES: u64 = 64 << 10;

/// What an encoding holds besides its rows (what it was encoded under: the session's
/// formatting, each column's types and format), as room beyond the result's Arrow bytes.
pub const ENCODED_BASE_BYTES: u64 = 1 << 10;

/// What a frontend kept.
pub type Kept = Arc<dyn Any + Send + Sync>;

/// One cached result's kept encoding (at most one: the last kept replaces the one before).
pub struct Encodings {
    kept: Mutex<Option<Kept>>,
    /// Bytes an encoding may hold (0: none is kept).
    room: u64,
}

impl std::fmt::Debug for Encodings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encodings")
            .field("room", &self.room)
            .finish_non_exhaustive()
    }
}

impl Encodings {
    /// Room for the encoding of a result of `arrow_bytes`, when it is small: as many bytes
    /// and [`ENCODED_BASE_BYTES`].
    pub fn for_result(arrow_bytes: u64) -> Self {
        Self {
            kept: Mutex::new(None),
            room: if arrow_bytes <= ENCODED_MAX_BYTES {
                arrow_bytes + ENCODED_BASE_BYTES
            } else {
                0
            },
        }
    }

    /// The bytes an encoding may hold (what the entry is charged for it).
    pub fn room(&self) -> u64 {
        self.room
    }

    /// The encoding kept last, if any.
    pub fn get(&self) -> Option<Kept> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Keeps `encoded`, of `bytes` on the heap, when it fits the room (else nothing changes);
    /// whether it was kept.
    pub fn keep(&self, encoded: Kept, bytes: u64) -> bool {
        if bytes > self.room {
            return false;
        }
        *self.kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(encoded);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encoding_is_kept_only_within_the_room_charged_for_it() {
        let small = Encodings::for_result(1_000);
        assert_eq!(small.room(), 1_000 + ENCODED_BASE_BYTES);
        assert!(
            !small.keep(Arc::new(1u8), 1_001 + ENCODED_BASE_BYTES),
            "larger than its room"
        );
        assert!(small.get().is_none());
        assert!(small.keep(Arc::new(7u32), 1_000 + ENCODED_BASE_BYTES));
        let kept = small.get().expect("kept");
        assert_eq!(kept.downcast_ref::<u32>(), Some(&7));

        let large = Encodings::for_result(ENCODED_MAX_BYTES + 1);
        assert_eq!(
            large.room(),
            0,
            "a large result is charged nothing for an encoding"
        );
        assert!(!large.keep(Arc::new(1u8), 1));
    }
}
