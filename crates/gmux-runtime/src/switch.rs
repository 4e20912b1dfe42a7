//! A process's side of a context switch, as a state machine without threads or devices:
//! given the daemon's grant and the memory's state, what the agent does next, and which
//! step's copies it waits for. `E` is an event after a step's copies; dropping one
//! destroys it.
//!
//! One step's copies stay in flight while the next is issued, so the link never idles
//! between steps; a paused tenant's fill keeps at most one step in flight, so that its
//! copies never queue far ahead of the running tenant's.

use gmux_core::protocol::Fill;

/// What the agent sees when it wakes.
#[derive(Debug, Clone, Copy)]
pub struct View {
    /// The grant's cap.
    pub cap: u64,
    /// What the grant asks to bring in.
    pub fill: Fill,
    /// The grant's generation (one per grant taken).
    pub generation: u64,
    /// The memory limit.
    pub limit: u64,
    /// Resident bytes.
    pub resident: u64,
    /// Physical memory held, mapped or spare.
    pub held: u64,
}

/// The agent's next move.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<E> {
    /// Nothing to move: report and wait for the next grant.
    Rest,
    /// Issue one shrink step towards `cap`, then call [`Switch::shrunk`].
    Shrink {
        /// The grant's cap.
        cap: u64,
    },
    /// The grant grew back while a shrink step was in flight: wait for its copies, then
    /// free what they evicted.
    Drain(E),
    /// Issue one fill step, then call [`Switch::filled`].
    Fill {
        /// Bring in everything, not only the next slice.
        whole: bool,
    },
}

/// A change between running and paused.
#[derive(Debug, PartialEq, Eq)]
pub enum Edge {
    /// The process may launch again.
    In,
    /// The process was paused after releasing `released` commands in its slot.
    Out {
        /// Commands released since it was switched in.
        released: u64,
    },
}

/// What is moving.
#[derive(Debug, Default)]
enum Phase<E> {
    /// Nothing.
    #[default]
    Settled,
    /// Shrink steps; the newest one's copies may be in flight.
    Shrinking(Option<E>),
    /// Fill steps of the current generation; a paused tenant's newest one may be in flight.
    Filling(Option<E>),
}

/// A process's switch state.
#[derive(Debug)]
pub struct Switch<E> {
    running: bool,
    commands_at_switch: u64,
    /// The generation whose fill is complete.
    filled: Option<u64>,
    phase: Phase<E>,
}

impl<E> Default for Switch<E> {
    fn default() -> Self {
        Switch { running: false, commands_at_switch: 0, filled: None, phase: Phase::Settled }
    }
}

impl<E> Switch<E> {
    /// Notes whether the grant lets the process run, with its commands released so far.
    pub fn observe(&mut self, run: bool, commands: u64) -> Option<Edge> {
        if run == self.running {
            return None;
        }
        self.running = run;
        if run {
            self.commands_at_switch = commands;
            Some(Edge::In)
        } else {
            Some(Edge::Out { released: commands.saturating_sub(self.commands_at_switch) })
        }
    }

    /// The limit to take at once: the grant's cap, when it grew and nothing must move.
    pub fn raise(&self, v: &View) -> Option<u64> {
        (v.cap > v.limit && v.resident <= v.cap).then_some(v.cap)
    }

    /// The next move.
    pub fn next(&mut self, v: &View) -> Action<E> {
        if v.limit > v.cap || v.resident > v.cap || v.held > v.cap.max(v.resident) {
            return Action::Shrink { cap: v.cap };
        }
        if let Phase::Shrinking(e) = &mut self.phase {
            let e = e.take();
            self.phase = Phase::Settled;
            if let Some(e) = e {
                return Action::Drain(e);
            }
        }
        let wants = (self.running || v.fill == Fill::Forecast) && v.fill != Fill::None && self.filled != Some(v.generation);
        if wants {
            Action::Fill { whole: v.fill == Fill::Whole }
        } else {
            Action::Rest
        }
    }

    /// After a shrink step whose copies end with `done`; `more`: more must go. Returns
    /// the event to wait for now (the previous step's, or this one's at the last step),
    /// after which the evicted memory is freed; `None`: issue the next step at once.
    pub fn shrunk(&mut self, more: bool, done: E) -> Option<E> {
        let prev = match std::mem::take(&mut self.phase) {
            Phase::Shrinking(e) => e,
            _ => None,
        };
        if more {
            self.phase = Phase::Shrinking(Some(done));
            prev
        } else {
            Some(done)
        }
    }

    /// After a fill step of grant `generation` whose copies end with `done` (`None`:
    /// it moved nothing); `more`: more is left that fits. Returns the event to wait for
    /// now, and whether this generation's fill is complete.
    pub fn filled(&mut self, more: bool, done: Option<E>, generation: u64) -> (Option<E>, bool) {
        let prev = match std::mem::take(&mut self.phase) {
            Phase::Filling(e) => e,
            _ => None,
        };
        let wait = match done {
            Some(d) if !self.running => {
                self.phase = Phase::Filling(Some(d));
                prev
            }
            _ => {
                self.phase = Phase::Filling(None);
                None
            }
        };
        if more {
            return (wait, false);
        }
        self.phase = Phase::Settled;
        self.filled = Some(generation);
        (wait, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// An event that logs its destruction.
    #[derive(Debug)]
    struct Ev(u32, Rc<RefCell<Vec<u32>>>);

    impl Drop for Ev {
        fn drop(&mut self) {
            self.1.borrow_mut().push(self.0);
        }
    }

    impl PartialEq for Ev {
        fn eq(&self, o: &Ev) -> bool {
            self.0 == o.0
        }
    }

    const G: u64 = 1 << 30;

    fn view(cap: u64, resident: u64, fill: Fill) -> View {
        View { cap, fill, generation: 1, limit: resident.max(cap), resident, held: resident }
    }

    #[test]
    fn a_shrink_keeps_one_step_in_flight_and_waits_for_the_last() {
        let dropped = Rc::new(RefCell::new(Vec::new()));
        let ev = |n| Ev(n, dropped.clone());
        let mut s: Switch<Ev> = Switch::default();
        assert_eq!(s.next(&view(2 * G, 3 * G, Fill::None)), Action::Shrink { cap: 2 * G });
        assert_eq!(s.shrunk(true, ev(1)), None, "the first step's copies run while the second is issued");
        assert_eq!(s.shrunk(true, ev(2)).map(|e| e.0), Some(1), "then the agent waits for the first");
        assert_eq!(s.shrunk(false, ev(3)).map(|e| e.0), Some(3), "at the last step, for its own copies");
        assert_eq!(*dropped.borrow(), vec![1, 2, 3], "every event is destroyed once, in order");
        assert_eq!(s.next(&view(2 * G, 2 * G, Fill::None)), Action::Rest);
    }

    #[test]
    fn a_grant_that_grows_back_mid_shrink_drains_the_step_in_flight() {
        let dropped = Rc::new(RefCell::new(Vec::new()));
        let mut s: Switch<Ev> = Switch::default();
        s.next(&view(G, 3 * G, Fill::None));
        assert_eq!(s.shrunk(true, Ev(7, dropped.clone())), None);
        let grown = View { limit: G, ..view(4 * G, 3 * G, Fill::None) };
        assert_eq!(s.raise(&grown), Some(4 * G), "the limit follows a grant that grew");
        assert_eq!(s.next(&View { limit: 4 * G, ..grown }), Action::Drain(Ev(7, dropped.clone())));
        assert_eq!(s.next(&View { limit: 4 * G, ..grown }), Action::Rest, "drained once");
    }

    #[test]
    fn a_paused_fill_keeps_one_step_in_flight_and_a_running_one_none() {
        let dropped = Rc::new(RefCell::new(Vec::new()));
        let ev = |n| Ev(n, dropped.clone());
        let mut s: Switch<Ev> = Switch::default();
        let paused = view(4 * G, G, Fill::Forecast);
        assert_eq!(s.next(&paused), Action::Fill { whole: false }, "a paused tenant fills ahead of its turn");
        assert_eq!(s.filled(true, Some(ev(1)), 1), (None, false));
        assert_eq!(s.filled(true, Some(ev(2)), 1).0.map(|e| e.0), Some(1), "then waits for the step before");
        assert_eq!(s.observe(true, 10), Some(Edge::In));
        assert_eq!(s.filled(true, Some(ev(3)), 1), (None, false), "a running tenant never waits for its fill");
        assert_eq!(*dropped.borrow(), vec![1, 2, 3], "the paused step's event and the running one's go at once");
        let (wait, done) = s.filled(false, None, 1);
        assert!(wait.is_none() && done);
        assert_eq!(s.next(&paused), Action::Rest, "generation 1 is filled");
        assert_eq!(s.next(&View { generation: 2, ..paused }), Action::Fill { whole: false }, "a new grant fills again");
    }

    #[test]
    fn slots_count_the_commands_released_while_running() {
        let mut s: Switch<Ev> = Switch::default();
        assert_eq!(s.observe(false, 0), None);
        assert_eq!(s.observe(true, 100), Some(Edge::In));
        assert_eq!(s.observe(true, 120), None);
        assert_eq!(s.observe(false, 142), Some(Edge::Out { released: 42 }));
    }

    #[test]
    fn no_fill_is_asked_or_none_is_wanted() {
        let mut s: Switch<Ev> = Switch::default();
        assert_eq!(s.next(&view(4 * G, G, Fill::Whole)), Action::Rest, "a paused tenant fills only a forecast");
        s.observe(true, 0);
        assert_eq!(s.next(&view(4 * G, G, Fill::None)), Action::Rest);
        assert_eq!(s.next(&view(4 * G, G, Fill::Whole)), Action::Fill { whole: true });
        assert_eq!(s.next(&View { held: 5 * G, ..view(4 * G, G, Fill::Whole) }), Action::Shrink { cap: 4 * G }, "spare memory over the cap goes first");
    }
}
