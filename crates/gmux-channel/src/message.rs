//! What travels in a slot: one message in [`WORDS`] words. Decoding checks everything,
//! since the daemon decodes what an untrusted application wrote.

use crate::region::WORDS;

/// Longest job name a message carries, in bytes (a longer one is cut at a character).
pub const MAX_JOB_NAME: usize = 8 * (WORDS - 3);

/// A job's name as it travels: at most [`MAX_JOB_NAME`] bytes of UTF-8.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct JobName {
    len: u8,
    bytes: [u8; MAX_JOB_NAME],
}

impl JobName {
    /// `name`, cut to [`MAX_JOB_NAME`] bytes at a character boundary.
    pub fn new(name: &str) -> JobName {
        let mut end = name.len().min(MAX_JOB_NAME);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0; MAX_JOB_NAME];
        bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        JobName { len: end as u8, bytes }
    }

    /// The name (bytes that are not UTF-8, which only a forged message holds, as `�`).
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes[..self.len as usize])
    }
}

impl std::fmt::Debug for JobName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// One message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    /// Application → daemon: job `job` (numbered by the process) of kind `name` begins;
    /// the application expects it to take `expected_ns` of GPU time (0: unknown).
    JobBegin {
        /// The process's number for the job.
        job: u64,
        /// Its kind: jobs of one name are alike.
        name: JobName,
        /// The application's estimate of its GPU time, in nanoseconds (0: none).
        expected_ns: u64,
    },
    /// Application → daemon: job `job` ended.
    JobEnd {
        /// The process's number for the job.
        job: u64,
    },
    /// Application → daemon: answer with [`Message::Pong`] of the same `seq`.
    Ping {
        /// Echoed.
        seq: u64,
    },
    /// Daemon → application: the answer to [`Message::Ping`].
    Pong {
        /// The ping's.
        seq: u64,
    },
}

/// Why a slot is not a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadMessage {
    /// Its kind word is no message's.
    Kind(u32),
    /// Its name is longer than [`MAX_JOB_NAME`].
    NameLength(u32),
    /// Only the other end sends this message.
    WrongWay,
}

impl std::fmt::Display for BadMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadMessage::Kind(k) => write!(f, "a message of unknown kind {k}"),
            BadMessage::NameLength(n) => write!(f, "a job name of {n} bytes (at most {MAX_JOB_NAME})"),
            BadMessage::WrongWay => write!(f, "a message only the other end sends"),
        }
    }
}

const JOB_BEGIN: u32 = 1;
const JOB_END: u32 = 2;
const PING: u32 = 3;
const PONG: u32 = 4;

impl Message {
    /// Whether the application sends it (else the daemon does).
    pub fn from_application(&self) -> bool {
        !matches!(self, Message::Pong { .. })
    }

    /// The slot's words: kind and name length, a number, a second number, the name.
    pub fn encode(&self) -> [u64; WORDS] {
        let mut w = [0u64; WORDS];
        let (kind, a) = match *self {
            Message::JobBegin { job, name, expected_ns } => {
                w[0] = u64::from(name.len) << 32;
                w[2] = expected_ns;
                for (i, chunk) in name.bytes.chunks(8).enumerate() {
                    w[3 + i] = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                }
                (JOB_BEGIN, job)
            }
            Message::JobEnd { job } => (JOB_END, job),
            Message::Ping { seq } => (PING, seq),
            Message::Pong { seq } => (PONG, seq),
        };
        w[0] |= u64::from(kind);
        w[1] = a;
        w
    }

    /// The message in `w`, checked.
    pub fn decode(w: &[u64; WORDS]) -> Result<Message, BadMessage> {
        let kind = w[0] as u32;
        let len = (w[0] >> 32) as u32;
        Ok(match kind {
            JOB_BEGIN => {
                if len as usize > MAX_JOB_NAME {
                    return Err(BadMessage::NameLength(len));
                }
                let mut bytes = [0u8; MAX_JOB_NAME];
                for (i, chunk) in bytes.chunks_mut(8).enumerate() {
                    chunk.copy_from_slice(&w[3 + i].to_le_bytes());
                }
                bytes[len as usize..].fill(0);
                Message::JobBegin { job: w[1], name: JobName { len: len as u8, bytes }, expected_ns: w[2] }
            }
            JOB_END => Message::JobEnd { job: w[1] },
            PING => Message::Ping { seq: w[1] },
            PONG => Message::Pong { seq: w[1] },
            k => return Err(BadMessage::Kind(k)),
        })
    }
}
