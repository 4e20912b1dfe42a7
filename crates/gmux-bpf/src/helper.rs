//! The helpers a program may call, with the arguments each takes, so that the verifier
//! can check them. Their numbers are Linux's, so that C written for Linux's helpers reads
//! the same.

/// A helper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Helper {
    /// `void *map_lookup_elem(map, const void *key)`: the value, or null.
    MapLookup,
    /// `long map_update_elem(map, const void *key, const void *value, u64 flags)`.
    MapUpdate,
    /// `long map_delete_elem(map, const void *key)`.
    MapDelete,
    /// `u64 now_ns(void)`: the time of the decision the hook is part of.
    Now,
    /// `long trace(const char *fmt, u32 fmt_size, u64 arg)`: a line in the daemon's
    /// log, rate limited.
    Trace,
    /// `long ringbuf_output(map, const void *data, u64 size, u64 flags)`: a record in a
    /// ring buffer map; negative when it is full or the record too long.
    RingbufOutput,
}

/// What an argument register must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// A map reference.
    Map,
    /// A pointer to the map's key size of initialized stack.
    Key,
    /// A pointer to the map's value size of initialized stack.
    Value,
    /// A pointer to initialized stack of the size in the next register, a constant.
    Bytes,
    /// A constant from 1 to 256: the size of the `Bytes` before it.
    Size,
    /// A number.
    Scalar,
}

/// What a helper returns in `r0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ret {
    /// A number.
    Scalar,
    /// A pointer to a value of the map in `r1`, or null.
    ValueOrNull,
}

impl Helper {
    /// Every helper.
    pub const ALL: [Helper; 6] = [Helper::MapLookup, Helper::MapUpdate, Helper::MapDelete, Helper::Now, Helper::Trace, Helper::RingbufOutput];

    /// Its number (a `call` instruction's immediate).
    pub fn id(self) -> i32 {
        match self {
            Helper::MapLookup => 1,
            Helper::MapUpdate => 2,
            Helper::MapDelete => 3,
            Helper::Now => 5,
            Helper::Trace => 6,
            Helper::RingbufOutput => 130,
        }
    }

    /// The helper of number `id`.
    pub fn from_id(id: i32) -> Option<Helper> {
        Helper::ALL.into_iter().find(|h| h.id() == id)
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Helper::MapLookup => "map_lookup_elem",
            Helper::MapUpdate => "map_update_elem",
            Helper::MapDelete => "map_delete_elem",
            Helper::Now => "now_ns",
            Helper::Trace => "trace",
            Helper::RingbufOutput => "ringbuf_output",
        }
    }

    /// Its arguments, from `r1`.
    pub fn args(self) -> &'static [Arg] {
        match self {
            Helper::MapLookup | Helper::MapDelete => &[Arg::Map, Arg::Key],
            Helper::MapUpdate => &[Arg::Map, Arg::Key, Arg::Value, Arg::Scalar],
            Helper::Now => &[],
            Helper::Trace => &[Arg::Bytes, Arg::Size, Arg::Scalar],
            Helper::RingbufOutput => &[Arg::Map, Arg::Bytes, Arg::Size, Arg::Scalar],
        }
    }

    /// What it returns.
    pub fn ret(self) -> Ret {
        match self {
            Helper::MapLookup => Ret::ValueOrNull,
            _ => Ret::Scalar,
        }
    }
}
