//! `gmux top`: a live view of the daemon and its tenants. On a terminal it is a ratatui
//! screen with keys to sort, select and freeze; otherwise it prints one plain line per
//! refresh.

mod view;

use crate::Failure;
use gmuxd::ctl::{request, Request};
use gmuxd::status::Status;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row as TableRow, Table, TableState};
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};
use view::{SortKey, View};

/// Arguments of `gmux top`.
#[derive(Debug, clap::Args)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, default_value = "1", value_parser = interval)]
    pub interval: f64,
    /// One plain line per refresh, even on a terminal.
    #[arg(long)]
    pub plain: bool,
    /// Stop after this many refreshes (0: run until q or Ctrl-C).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub count: u64,
}

fn interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a refresh interval: give seconds from 0.1 to 3600, e.g. 1")),
    }
}

/// Asks the daemon at `socket` for its status.
fn fetch(socket: &Path) -> Result<Status, Failure> {
    let reply = request(socket, &Request::Ps { json: true })?;
    if !reply.ok {
        return Err(Failure::Runtime(reply.text));
    }
    serde_json::from_str(&reply.text)
        .map_err(|e| Failure::Runtime(format!("gmuxd at {} answered a status this gmux cannot read ({e}); is it the same version?", socket.display())))
}

/// Runs `gmux top` against the daemon at `socket`.
pub fn top(args: &TopArgs, socket: &Path) -> Result<(), Failure> {
    let first = fetch(socket)?;
    if args.plain || !std::io::stdout().is_terminal() {
        plain(args, socket, first)
    } else {
        screen(args, socket, first)
    }
}

/// Refreshes: the previous snapshot, when it was taken, and the sort key.
struct Refresher<'a> {
    socket: &'a Path,
    prev: Status,
    at: Instant,
    key: SortKey,
}

impl Refresher<'_> {
    /// A new view, or why there is none (the previous one stays).
    fn refresh(&mut self) -> Result<View, String> {
        let now = fetch(self.socket).map_err(|f| f.message().to_string())?;
        let dt = self.at.elapsed().as_secs_f64();
        self.at = Instant::now();
        let v = View::new(Some(&self.prev), now.clone(), dt, self.key);
        self.prev = now;
        Ok(v)
    }
}

fn plain(args: &TopArgs, socket: &Path, first: Status) -> Result<(), Failure> {
    let period = Duration::from_secs_f64(args.interval);
    let mut r = Refresher { socket, prev: first, at: Instant::now(), key: SortKey::Name };
    for n in 1.. {
        std::thread::sleep(period);
        match r.refresh() {
            Ok(v) => println!("{}", v.plain()),
            Err(e) => println!("{e}"),
        }
        if args.count > 0 && n >= args.count {
            break;
        }
    }
    Ok(())
}

/// What the screen shows besides the view: the selected tenant and the last message.
struct Screen {
    view: View,
    selected: usize,
    message: String,
}

fn screen(args: &TopArgs, socket: &Path, first: Status) -> Result<(), Failure> {
    let period = Duration::from_secs_f64(args.interval);
    let mut r = Refresher { socket, prev: first.clone(), at: Instant::now(), key: SortKey::Name };
    let mut s = Screen { view: View::new(None, first, 0.0, r.key), selected: 0, message: String::new() };
    let mut terminal = ratatui::try_init().map_err(|e| Failure::Runtime(format!("cannot use the terminal ({e}); run `gmux top --plain`")))?;
    let mut next = Instant::now() + period;
    let mut refreshes = 0u64;
    let result = loop {
        if let Err(e) = terminal.draw(|f| draw(f, &s, r.key)) {
            break Err(Failure::Runtime(format!("cannot draw on the terminal ({e}); run `gmux top --plain`")));
        }
        let wait = next.saturating_duration_since(Instant::now());
        match event::poll(wait) {
            Ok(true) => match event::read() {
                Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => {
                    let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => break Ok(()),
                        _ if ctrl_c => break Ok(()),
                        KeyCode::Down | KeyCode::Char('j') => s.selected = (s.selected + 1).min(s.view.rows.len().saturating_sub(1)),
                        KeyCode::Up | KeyCode::Char('k') => s.selected = s.selected.saturating_sub(1),
                        KeyCode::Char('s') => {
                            r.key = r.key.next();
                            s.view.sort(r.key);
                        }
                        KeyCode::Char('f') => s.message = toggle_freeze(socket, &s),
                        _ => {}
                    }
                }
                Ok(_) => {}
                Err(e) => break Err(Failure::Runtime(format!("cannot read the keyboard ({e})"))),
            },
            Ok(false) => {
                match r.refresh() {
                    Ok(v) => s.view = v,
                    Err(e) => s.message = e,
                }
                s.selected = s.selected.min(s.view.rows.len().saturating_sub(1));
                next = Instant::now() + period;
                refreshes += 1;
                if args.count > 0 && refreshes >= args.count {
                    break Ok(());
                }
            }
            Err(e) => break Err(Failure::Runtime(format!("cannot read the keyboard ({e})"))),
        }
    };
    let restored = ratatui::try_restore();
    result?;
    restored.map_err(|e| Failure::Runtime(format!("cannot restore the terminal ({e}); run `reset`")))
}

/// Freezes the selected tenant, or unfreezes it if frozen, as `gmux set` would (the
/// daemon allows it to its owner and root only); returns what to tell the user.
fn toggle_freeze(socket: &Path, s: &Screen) -> String {
    let Some(row) = s.view.rows.get(s.selected) else { return "no tenant selected".into() };
    let name = &row.now.name;
    let value = if s.view.frozen(name) { "0" } else { "1" };
    let req = Request::Set { tenant: name.clone(), knob: "compute.freeze".into(), value: value.into() };
    match request(socket, &req) {
        Ok(r) if r.ok => format!("{name}: compute.freeze {value}"),
        Ok(r) => r.text,
        Err(f) => f.message().to_string(),
    }
}

fn draw(f: &mut ratatui::Frame, s: &Screen, key: SortKey) {
    let [head, body, foot] = Layout::vertical([Constraint::Length(1), Constraint::Min(1), Constraint::Length(1)]).areas(f.area());
    f.render_widget(Paragraph::new(Line::from(format!("gmux top  {}", s.view.header()))), head);
    let cells = s.view.cells();
    let widths: Vec<Constraint> =
        (0..cells[0].len()).map(|c| Constraint::Length(cells.iter().map(|r| r[c].chars().count()).max().unwrap_or(0) as u16)).collect();
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let rows = cells[1..].iter().map(|r| TableRow::new(r.iter().map(|c| Cell::from(c.as_str()))));
    let table = Table::new(rows, widths)
        .header(TableRow::new(cells[0].iter().map(|c| Cell::from(c.as_str()))).style(bold))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .column_spacing(2);
    let mut state = TableState::default().with_selected((!s.view.rows.is_empty()).then_some(s.selected));
    f.render_stateful_widget(table, body, &mut state);
    let help = format!("q quit  ↑↓ select  s sort (by {})  f freeze/unfreeze  {}", key.name(), s.message);
    f.render_widget(Paragraph::new(Line::from(help)), foot);
}
