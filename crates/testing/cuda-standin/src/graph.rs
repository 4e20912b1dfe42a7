//! CUDA graphs: graphs of nodes, their clones, and executable snapshots of them.
//!
//! Graphs, nodes and executable graphs live in one registry, and each one's id is its
//! handle. A child graph node owns its embedded graph. A clone remembers the graph it was
//! cloned from, and each of its nodes the node it copies. An executable graph is a
//! flattened copy: child graphs inlined, each step remembering the node it came from, so
//! later changes to the graph do not reach it. Its steps are in a topological order of the
//! graph's edges (ties in insertion order, see [`topology`]), so executing them one after
//! another on one stream respects every edge.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex, MutexGuard};

use cuda_abi::*;

mod op;
mod topology;

pub use op::{check_memset, HostCall, KernelCall, Op};
pub use topology::{destroy_node, edges, find_in_clone};

/// A graph's id, which is also its `CUgraph`.
pub type GraphId = usize;
/// A node's id, which is also its `CUgraphNode`.
pub type NodeId = usize;
/// An executable graph's id, which is also its `CUgraphExec`.
pub type ExecId = usize;

/// Which counter of `Registry::next` an id comes from.
const GRAPH: usize = 0;
const NODE: usize = 1;
const EXEC: usize = 2;
/// Where each kind's ids (handles) start: apart from each other and from other handles.
const BASES: [usize; 3] = [0x5500_0000_0000, 0x5600_0000_0000, 0x5700_0000_0000];

struct Node {
    graph: GraphId,
    deps: Vec<NodeId>,
    op: Op,
    /// `kernelParams` handed out by `cuGraphKernelNodeGetParams`: addresses in the args.
    param_ptrs: Vec<usize>,
    /// The node this one copies, in a clone.
    origin: Option<NodeId>,
}

struct Graph {
    nodes: Vec<NodeId>,
    /// The child graph node that embeds this graph.
    owner: Option<NodeId>,
    /// The graph this one is a clone of.
    origin: Option<GraphId>,
}

/// One node of an executable graph; `deps` are indices of earlier steps.
#[derive(Clone)]
struct Step {
    source: NodeId,
    ty: u32,
    deps: Vec<usize>,
    /// Never [`Op::Child`]: a child graph node becomes its graph's steps, then an empty step.
    op: Op,
}

struct Exec {
    steps: Vec<Step>,
    /// Step of each node instantiated (or updated) into it.
    index: HashMap<NodeId, usize>,
}

/// Stream work an executable graph launch enqueues, in order.
pub enum Segment {
    /// Kernel, copy, memset and host steps, run one after another as one operation.
    Ops(Vec<Op>),
    Record(u64),
    Wait(u64),
}

/// Why `cuGraphExecUpdate` refused a graph: a `CUgraphExecUpdateResult` and the nodes of
/// the new and of the instantiated graph where it differs (0 if none).
#[derive(Debug, PartialEq, Eq)]
pub struct UpdateError {
    pub result: u32,
    pub node: NodeId,
    pub from: NodeId,
}

struct Registry {
    next: [usize; 3],
    graphs: HashMap<GraphId, Graph>,
    nodes: HashMap<NodeId, Node>,
    execs: HashMap<ExecId, Exec>,
}

static REGISTRY: LazyLock<Mutex<Registry>> =
    LazyLock::new(|| Mutex::new(Registry { next: BASES, graphs: HashMap::new(), nodes: HashMap::new(), execs: HashMap::new() }));

fn reg() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

type Res<T> = Result<T, CUresult>;

impl Registry {
    fn id(&mut self, kind: usize) -> usize {
        self.next[kind] += 1;
        self.next[kind]
    }

    fn graph(&self, g: GraphId) -> Res<&Graph> {
        self.graphs.get(&g).ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    fn node(&self, n: NodeId) -> Res<&Node> {
        self.nodes.get(&n).ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    fn exec(&mut self, e: ExecId) -> Res<&mut Exec> {
        self.execs.get_mut(&e).ok_or(CUDA_ERROR_INVALID_VALUE)
    }

    fn new_graph(&mut self) -> GraphId {
        let g = self.id(GRAPH);
        self.graphs.insert(g, Graph { nodes: Vec::new(), owner: None, origin: None });
        g
    }

    fn add(&mut self, g: GraphId, deps: &[NodeId], op: Op) -> Res<NodeId> {
        self.graph(g)?;
        let mut seen = HashSet::new();
        if !deps.iter().all(|d| seen.insert(d) && self.nodes.get(d).is_some_and(|n| n.graph == g)) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let n = self.id(NODE);
        if let Op::Child(c) = op {
            match self.graphs.get_mut(&c) {
                Some(child) if child.owner.is_none() && c != g => child.owner = Some(n),
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            }
        }
        self.nodes.insert(n, Node { graph: g, deps: deps.to_vec(), op, param_ptrs: Vec::new(), origin: None });
        self.graphs.get_mut(&g).unwrap().nodes.push(n);
        Ok(n)
    }

    fn clone_graph(&mut self, g: GraphId) -> Res<GraphId> {
        self.graph(g)?;
        let copy = self.new_graph();
        self.graphs.get_mut(&copy).unwrap().origin = Some(g);
        let mut map = HashMap::new();
        for n in self.order(g) {
            let node = &self.nodes[&n];
            let deps: Vec<NodeId> = node.deps.iter().map(|d| map[d]).collect();
            let op = match node.op.clone() {
                Op::Child(c) => Op::Child(self.clone_graph(c)?),
                op => op,
            };
            let c = self.add(copy, &deps, op)?;
            self.nodes.get_mut(&c).unwrap().origin = Some(n);
            map.insert(n, c);
        }
        Ok(copy)
    }

    fn remove_graph(&mut self, g: GraphId) {
        for n in self.graphs.remove(&g).map(|g| g.nodes).unwrap_or_default() {
            if let Some(Node { op: Op::Child(c), .. }) = self.nodes.remove(&n) {
                self.remove_graph(c);
            }
        }
    }

    /// Appends the steps of graph `g`, whose roots depend on steps `outer`; returns the
    /// indices of the steps appended.
    fn flatten(&self, g: GraphId, outer: &[usize], steps: &mut Vec<Step>, index: &mut HashMap<NodeId, usize>) -> Vec<usize> {
        let first = steps.len();
        for n in self.order(g) {
            let node = &self.nodes[&n];
            let mut deps: Vec<usize> = node.deps.iter().map(|d| index[d]).collect();
            if deps.is_empty() {
                deps = outer.to_vec();
            }
            let step = match &node.op {
                Op::Child(c) => {
                    let inner = self.flatten(*c, &deps, steps, index);
                    Step { source: n, ty: CU_GRAPH_NODE_TYPE_GRAPH, deps: if inner.is_empty() { deps } else { inner }, op: Op::Empty }
                }
                op => Step { source: n, ty: op.ty(), deps, op: op.clone() },
            };
            index.insert(n, steps.len());
            steps.push(step);
        }
        (first..steps.len()).collect()
    }

    fn snapshot(&self, g: GraphId) -> Res<Exec> {
        self.graph(g)?;
        let (mut steps, mut index) = (Vec::new(), HashMap::new());
        self.flatten(g, &[], &mut steps, &mut index);
        Ok(Exec { steps, index })
    }
}

/// `cuGraphCreate`.
pub fn create() -> GraphId {
    reg().new_graph()
}

/// `cuGraphDestroy`: the graph, its nodes and their embedded graphs. An embedded graph
/// belongs to its node and cannot be destroyed alone.
pub fn destroy(g: GraphId) -> Res<()> {
    let mut r = reg();
    if r.graph(g)?.owner.is_some() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    r.remove_graph(g);
    Ok(())
}

/// `cuGraphClone`: a deep copy, embedded graphs included.
pub fn clone_graph(g: GraphId) -> Res<GraphId> {
    reg().clone_graph(g)
}

/// The graph's nodes in insertion order.
pub fn nodes(g: GraphId) -> Res<Vec<NodeId>> {
    Ok(reg().graph(g)?.nodes.clone())
}

/// Adds a node after `deps` (distinct nodes of `g`). An [`Op::Child`] graph must be one
/// nobody owns yet; the node takes it.
pub fn add(g: GraphId, deps: &[NodeId], op: Op) -> Res<NodeId> {
    reg().add(g, deps, op)
}

/// What a node does.
pub fn op(n: NodeId) -> Res<Op> {
    Ok(reg().node(n)?.op.clone())
}

/// Replaces what a node does with an op of the same type.
pub fn set_op(n: NodeId, op: Op) -> Res<()> {
    let mut r = reg();
    let node = r.nodes.get_mut(&n).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if node.op.ty() != op.ty() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    node.op = op;
    node.param_ptrs.clear();
    Ok(())
}

/// A kernel node's call and a `kernelParams` array pointing at its stored argument values
/// (null without parameters), valid while the node lives and keeps these parameters.
pub fn kernel_params(n: NodeId) -> Res<(KernelCall, *mut *mut c_void)> {
    let mut r = reg();
    let node = r.nodes.get_mut(&n).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let Op::Kernel(call) = &node.op else { return Err(CUDA_ERROR_INVALID_VALUE) };
    let base = call.args.as_ptr() as usize;
    node.param_ptrs = call.info.offsets.iter().map(|o| base + o).collect();
    let ptrs = if node.param_ptrs.is_empty() { std::ptr::null_mut() } else { node.param_ptrs.as_mut_ptr() as *mut *mut c_void };
    Ok((call.clone(), ptrs))
}

/// The nodes in `from` and every node they depend on, transitively.
pub fn ancestors(from: &[NodeId]) -> HashSet<NodeId> {
    let r = reg();
    let (mut seen, mut todo) = (HashSet::new(), from.to_vec());
    while let Some(n) = todo.pop() {
        if seen.insert(n) {
            todo.extend(r.nodes.get(&n).map(|node| node.deps.clone()).unwrap_or_default());
        }
    }
    seen
}

/// `cuGraphInstantiate`: a snapshot of the graph as it is now.
pub fn instantiate(g: GraphId) -> Res<ExecId> {
    let mut r = reg();
    let exec = r.snapshot(g)?;
    let e = r.id(EXEC);
    r.execs.insert(e, exec);
    Ok(e)
}

/// `cuGraphExecDestroy`.
pub fn destroy_exec(e: ExecId) -> Res<()> {
    reg().execs.remove(&e).map(drop).ok_or(CUDA_ERROR_INVALID_VALUE)
}

/// Checks that an executable graph exists.
pub fn exec_exists(e: ExecId) -> Res<()> {
    reg().exec(e).map(drop)
}

/// The stream work of one launch of `e`.
pub fn launch_plan(e: ExecId) -> Res<Vec<Segment>> {
    let mut r = reg();
    let mut plan = Vec::new();
    for step in &r.exec(e)?.steps {
        match &step.op {
            Op::WaitEvent(ev) => plan.push(Segment::Wait(*ev)),
            Op::EventRecord(ev) => plan.push(Segment::Record(*ev)),
            Op::Empty | Op::Child(_) => {}
            op => match plan.last_mut() {
                Some(Segment::Ops(ops)) => ops.push(op.clone()),
                _ => plan.push(Segment::Ops(vec![op.clone()])),
            },
        }
    }
    Ok(plan)
}

/// A new graph with the steps of `e` as nodes (a child graph's own node becomes an empty
/// node), for capturing a launch of `e`.
pub fn graph_of_exec(e: ExecId) -> Res<GraphId> {
    let mut r = reg();
    let steps = r.exec(e)?.steps.clone();
    let g = r.new_graph();
    let mut ids: Vec<NodeId> = Vec::with_capacity(steps.len());
    for s in steps {
        let deps: Vec<NodeId> = s.deps.iter().map(|&d| ids[d]).collect();
        ids.push(r.add(g, &deps, s.op)?);
    }
    Ok(g)
}

/// `cuGraphExecKernelNodeSetParams` and the like: `node` is a node the executable graph
/// was instantiated or updated from, still in its graph; the op must keep its type, and a
/// memset or copy must be one-dimensional before and after ([`Op::exec_settable`]).
pub fn exec_set_op(e: ExecId, node: NodeId, op: Op) -> Res<()> {
    let mut r = reg();
    r.node(node)?;
    let exec = r.exec(e)?;
    let step = exec.index.get(&node).map(|&i| &mut exec.steps[i]).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if step.ty != op.ty() || !step.op.exec_settable() || !op.exec_settable() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    step.op = op;
    Ok(())
}

/// `cuGraphExecUpdate`: when `g` has the same steps (types and edges) as `e`, `e` takes
/// `g`'s parameters and its nodes can name steps of `e` from then on.
pub fn update(e: ExecId, g: GraphId) -> Res<Result<(), UpdateError>> {
    let mut r = reg();
    let new = r.snapshot(g)?;
    let exec = r.exec(e)?;
    let differs = |a: &Step, b: &Step| a.ty != b.ty || a.deps != b.deps;
    if let Some(i) = (0..exec.steps.len().min(new.steps.len())).find(|&i| differs(&exec.steps[i], &new.steps[i])) {
        let (old, new) = (&exec.steps[i], &new.steps[i]);
        let result = if old.ty != new.ty { CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED } else { CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED };
        return Ok(Err(UpdateError { result, node: new.source, from: old.source }));
    }
    if exec.steps.len() != new.steps.len() {
        return Ok(Err(UpdateError { result: CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, node: 0, from: 0 }));
    }
    for (i, (step, fresh)) in exec.steps.iter_mut().zip(new.steps).enumerate() {
        exec.index.insert(fresh.source, i);
        step.op = fresh.op;
    }
    Ok(Ok(()))
}
