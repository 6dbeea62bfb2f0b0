import type { Flow, FlowEdge } from '../../core/flow-steps';
import { compareJobIds, type Job } from '../../core/job';
import { html, type Html } from '../html';

/** One step of a flow in its graph: the jobs of its ref (a chain, when it continued), by id. */
export interface FlowNode {
  /** The step's ref; null for the chain of a job added alone. */
  ref: string | null;
  jobs: Job[];
  /** The chain's last job: the one that tells how the step stands, and the one a click opens. */
  last: Job;
  /** Its longest path of dependencies: 0 for a step that waits for none. */
  depth: number;
  /** Its place in its column, top first. */
  row: number;
}

/** An edge between two steps of the graph. */
export interface FlowLink {
  from: FlowNode;
  to: FlowNode;
  edge: FlowEdge;
}

/** The most steps drawn: beyond, the page keeps its tables and says why there is no graph. */
export const MAX_GRAPH_NODES = 200;

const NODE_W = 220;
const NODE_H = 52;
const GAP_X = 64;
const GAP_Y = 14;
const PAD = 6;

/**
 * The flow's steps in layers: a column per depth, left to right, each step after all it
 * waits for; in a column, steps ordered by where their dependencies sit (fewer crossings),
 * then by their first job's id (addFlow's order).
 */
export function layoutFlow(flow: Flow): { nodes: FlowNode[]; links: FlowLink[] } {
  const byRef = new Map<string | null, FlowNode>();
  for (const job of flow.jobs) {
    const node = byRef.get(job.flowRef);
    if (node) {
      node.jobs.push(job);
      node.last = job; // flow.jobs come by id: a continuation after the job it continues
    } else byRef.set(job.flowRef, { ref: job.flowRef, jobs: [job], last: job, depth: 0, row: 0 });
  }
  const refOf = new Map(flow.jobs.map((job) => [job.id, job.flowRef]));
  const links: FlowLink[] = [];
  const waitsFor = new Map<FlowNode, FlowNode[]>();
  for (const edge of flow.edges) {
    const to = byRef.get(refOf.get(edge.jobId) ?? null);
    const from = byRef.get(edge.dependencyRef);
    if (!to || !from || to === from) continue; // a job retention already deleted: its row in the tables still says so
    links.push({ from, to, edge });
    waitsFor.set(to, [...(waitsFor.get(to) ?? []), from]);
  }
  const depthOf = (node: FlowNode, path: Set<FlowNode>): number => {
    if (path.has(node)) return 0; // no cycle can be added: a guard, not a rule
    if (node.depth > 0 || !waitsFor.has(node)) return node.depth;
    path.add(node);
    node.depth = 1 + Math.max(...waitsFor.get(node)!.map((from) => depthOf(from, path)));
    path.delete(node);
    return node.depth;
  };
  const nodes = [...byRef.values()];
  for (const node of nodes) depthOf(node, new Set());
  const columns: FlowNode[][] = [];
  for (const node of nodes) (columns[node.depth] ??= []).push(node);
  for (const column of columns) {
    const centre = (node: FlowNode) => {
      const from = waitsFor.get(node) ?? [];
      return from.length === 0 ? 0 : from.reduce((sum, n) => sum + n.row, 0) / from.length;
    };
    column.sort((a, b) => centre(a) - centre(b) || compareJobIds(a.jobs[0].id, b.jobs[0].id));
    column.forEach((node, row) => (node.row = row));
  }
  return { nodes, links };
}

const cut = (text: string, max: number) => {
  const chars = [...text];
  return chars.length <= max ? text : `${chars.slice(0, max - 1).join('')}…`;
};

/** The flow's steps and edges as an SVG drawn on the server, each step a link to its (last) job's page. Job data reaches it through `html` only. */
export function flowGraph(flow: Flow): Html {
  const { nodes, links } = layoutFlow(flow);
  if (nodes.length === 0) return html`<div class="empty">No job of this flow is left.</div>`;
  if (nodes.length > MAX_GRAPH_NODES) {
    return html`<div class="empty">${nodes.length} steps: too many to draw. The tables below list every job and edge.</div>`;
  }
  const columns = Math.max(...nodes.map((node) => node.depth)) + 1;
  const rows = Math.max(...nodes.map((node) => node.row)) + 1;
  const width = PAD * 2 + columns * NODE_W + (columns - 1) * GAP_X;
  const height = PAD * 2 + rows * NODE_H + (rows - 1) * GAP_Y;
  const x = (node: FlowNode) => PAD + node.depth * (NODE_W + GAP_X);
  const y = (node: FlowNode) => PAD + node.row * (NODE_H + GAP_Y);
  const label = (node: FlowNode) => node.ref ?? `flow #${flow.flowId}`;

  const drawnLinks = links.map(({ from, to, edge }) => {
    const [x1, y1, x2, y2] = [x(from) + NODE_W, y(from) + NODE_H / 2, x(to), y(to) + NODE_H / 2];
    const bend = GAP_X / 2;
    const ended = edge.state ? `${edge.state}` : 'not ended yet';
    return html`<g class="link ${edge.state ? `s-${edge.state}` : 'pending'}" data-from="${label(from)}" data-to="${label(to)}">
<title>${label(to)} waits for ${label(from)} (${edge.policy}): ${ended}</title>
<path class="edge" d="M${x1} ${y1} C${x1 + bend} ${y1} ${x2 - bend} ${y2} ${x2 - 6} ${y2}"/>
<path class="head" d="M${x2 - 7} ${y2 - 4.5} L${x2} ${y2} L${x2 - 7} ${y2 + 4.5} Z"/></g>`;
  });
  const drawnNodes = nodes.map((node) => {
    const { last } = node;
    const [left, top] = [x(node), y(node)];
    const chain = node.jobs.length > 1 ? ` (its chain's job ${node.jobs.length})` : '';
    return html`<a href="jobs/${last.id}" class="node s-${last.state}" data-ref="${label(node)}" data-depth="${node.depth}" data-state="${last.state}">
<title>${label(node)}: job #${last.id}${chain}, ${last.taskIdentifier}, ${last.state}</title>
<rect class="box" x="${left}" y="${top}" width="${NODE_W}" height="${NODE_H}" rx="8"/>
<rect class="stripe" x="${left}" y="${top}" width="5" height="${NODE_H}" rx="2"/>
<text class="ref" x="${left + 14}" y="${top + 20}">${cut(label(node), 24)}</text>
<text class="state" x="${left + NODE_W - 10}" y="${top + 20}" text-anchor="end">${last.state}</text>
<text class="sub" x="${left + 14}" y="${top + 39}">#${last.id}${node.jobs.length > 1 ? ` (${node.jobs.length} jobs)` : ''} · ${cut(last.taskIdentifier, 22)}</text></a>`;
  });
  return html`<div class="graph"><svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-label="The flow's steps, each after the steps it waits for">
${drawnLinks}
${drawnNodes}
</svg></div>`;
}
