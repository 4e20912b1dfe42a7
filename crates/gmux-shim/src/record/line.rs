//! The lines of a trace (docs/trace-format.md) and the kind of each command.

use serde::Serialize;

/// The trace format version written (docs/trace-format.md).
pub const VERSION: u32 = 1;

/// One line of the trace, as gmux-sim's `trace::Record` reads it.
#[derive(Serialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub(super) enum Line<'a> {
    Header {
        version: u32,
        chunk_bytes: u64,
    },
    Alloc {
        tenant: &'a str,
        id: u32,
        bytes: u64,
    },
    Cmd {
        tenant: &'a str,
        stream: u32,
        kind: &'static str,
        name: &'a str,
        dur_us: f64,
        ws: &'a [Range],
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        task_end: bool,
    },
    Free {
        tenant: &'a str,
        id: u32,
    },
    Mark {
        tenant: &'a str,
        what: &'static str,
    },
}

/// A whole allocation in a command's working set.
#[derive(Serialize, Clone, Copy, Debug, PartialEq)]
pub(super) struct Range {
    pub(super) alloc: u32,
    pub(super) off: u64,
    pub(super) len: u64,
}

/// The trace kind of a command made through entry point `entry`.
pub(super) fn kind_of(entry: &str) -> &'static str {
    match entry {
        e if e.contains("Kernel") => "kernel",
        e if e.contains("Memset") || e.contains("WriteValue") => "memset",
        e if e.contains("Graph") => "graph",
        e if e.contains("WaitValue") => "event",
        _ => "memcpy",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_entry_point() {
        assert_eq!(kind_of("cuLaunchKernelEx_ptsz"), "kernel");
        assert_eq!(kind_of("cuLaunchCooperativeKernel"), "kernel");
        assert_eq!(kind_of("cuMemsetD2D8Async"), "memset");
        assert_eq!(kind_of("cuStreamWriteValue64_v2"), "memset");
        assert_eq!(kind_of("cuMemcpyHtoDAsync_v2"), "memcpy");
        assert_eq!(kind_of("cuGraphLaunch"), "graph");
        assert_eq!(kind_of("cuStreamWaitValue32"), "event");
    }

    #[test]
    fn lines_have_the_trace_format() {
        let ws = [Range { alloc: 3, off: 0, len: 4096 }];
        let cmd = Line::Cmd { tenant: "app", stream: 1, kind: "kernel", name: "add", dur_us: 12.5, ws: &ws, task_end: false };
        assert_eq!(
            serde_json::to_string(&cmd).unwrap(),
            r#"{"t":"cmd","tenant":"app","stream":1,"kind":"kernel","name":"add","dur_us":12.5,"ws":[{"alloc":3,"off":0,"len":4096}]}"#
        );
        let h = Line::Header { version: VERSION, chunk_bytes: 2 << 20 };
        assert_eq!(serde_json::to_string(&h).unwrap(), r#"{"t":"header","version":1,"chunk_bytes":2097152}"#);
    }
}
