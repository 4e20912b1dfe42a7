//! The serving channel between an application and gmuxd's dispatcher: two
//! single-producer single-consumer rings in a shared-memory region that the daemon makes
//! and hands to the application's shim over the daemon's socket.
//!
//! - [`Message`]: what a slot holds (job begin and end, ping and pong), checked when
//!   decoded.
//! - [`Server`] and [`Client`]: the daemon's and the application's ends; each polls
//!   briefly when busy and sleeps when idle (notify-then-poll).
//! - [`send_with_fds`] and [`recv_with_fds`]: the hand-over of the region.
//!
//! The daemon trusts nothing in the region: it keeps its own indices, checks the
//! application's, and decodes every slot into a checked [`Message`]. An application that
//! writes nonsense breaks only its own channel ([`Broken`]).

mod ends;
mod fdpass;
mod message;
mod region;
mod ring;

pub use ends::{Broken, Client, Handover, Server, CLIENT_POLL, HOLD};
pub use fdpass::{recv_with_fds, send_with_fds};
pub use message::{BadMessage, JobName, Message, MAX_JOB_NAME};
pub use region::{check, eventfd, ring_eventfd, SLOTS};

#[cfg(test)]
mod tests;
