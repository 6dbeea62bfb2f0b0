import { eventsChannel, finishedChannel, jobsChannel, quoteIdentifier } from './names';

/** The functions Flows1764300000000 creates or replaces, by signature (for its down()). */
export const FLOW_FUNCTIONS = [
  'flow_jobs_finished()',
  'settle_flow_jobs(bigint[])',
  'finish_flows(bigint[])',
  'reopen_flow_jobs(bigint[])',
  'add_flow(jsonb, uuid, bigint, smallint)',
  'complete_jobs(bigint[], jsonb)',
  'cancel_flow(bigint, text)',
  'sweep_flows(integer, integer)',
];

/** The columns of a finished_jobs row, in the order `finishedValues` gives them. */
export const FINISHED_COLUMNS = `id, task_identifier, queue_name, payload, priority, run_at, attempts, max_attempts, key, flags,
  state, result, progress, errors, last_error, worker_id, created_at, started_at, flow_id, flow_ref`;

/** The values of a finished_jobs row from blocked_jobs row `b` (never claimed: no attempt, no key). */
export const finishedOfBlocked = (b: string, state: string, lastError: string, result = 'null') => `
  ${b}.id, ${b}.task_identifier, ${b}.queue_name, ${b}.payload, ${b}.priority, coalesce(${b}.run_at, now()), 0, ${b}.max_attempts, null, ${b}.flags,
  ${state}, ${result}, null, null, ${lastError}, null, ${b}.created_at, null, ${b}.flow_id, ${b}.flow_ref`;

/** The values of a finished_jobs row from jobs row `j`. */
export const finishedOfJob = (j: string, state: string, lastError: string, workerId: string, result = 'null') => `
  ${j}.id, ${j}.task_identifier, ${j}.queue_name, ${j}.payload, ${j}.priority, ${j}.run_at, ${j}.attempts, ${j}.max_attempts, ${j}.key, ${j}.flags,
  ${state}, ${result}, ${j}.progress, ${j}.errors, ${lastError}, ${workerId}, ${j}.created_at, ${j}.started_at, ${j}.flow_id, ${j}.flow_ref`;

/** "Finished job `m` failed or was cancelled and a dependent took it in its stride": it has dependents, and none with the `fail` policy. */
const absorbed = (s: string, m: string) => `
  exists (select 1 from ${s}.job_dependencies e where e.dependency_id = ${m}.id)
  and not exists (select 1 from ${s}.job_dependencies e where e.dependency_id = ${m}.id and e.policy = 'fail')`;

/**
 * add_flow's check of its steps, raising JQ_INVALID_FLOW (plpgsql statements; `steps` the
 * function's argument). Part of Flows1764300000000's add_flow and of FlowAddOnce1765200000000's:
 * changing it changes what those migrations wrote, so a change is a new fragment.
 */
export const ADD_FLOW_CHECK = `       if jsonb_typeof(steps) is distinct from 'array' or jsonb_array_length(steps) = 0 then
         raise exception 'JQ_INVALID_FLOW: a flow needs at least one step' using errcode = '22023';
       end if;
       with spec as (select s.step, s.ord, s.step ->> 'ref' as ref from jsonb_array_elements(steps) with ordinality as s(step, ord))
       select problem into v_problem from (
         select 'step ' || ord || ' has no ref or no identifier' as problem from spec
         where ref is null or step ->> 'identifier' is null
         union all
         select 'the ref ' || ref || ' is used twice' from spec group by ref having count(*) > 1
         union all
         select 'step ' || p.ref || ' has onDependencyFailure ' || (p.step ->> 'onDependencyFailure') from spec p
         where coalesce(p.step ->> 'onDependencyFailure', 'fail') not in ('fail', 'ignore', 'continue')
         union all
         select 'step ' || p.ref || ' depends on ' || d.value || ', which is no step before it'
         from spec p cross join lateral jsonb_array_elements_text(coalesce(p.step -> 'dependsOn', '[]'::jsonb)) d(value)
         where not exists (select 1 from spec q where q.ref = d.value and q.ord < p.ord)
       ) problems limit 1;
       if v_problem is not null then
         raise exception 'JQ_INVALID_FLOW: %', v_problem using errcode = '22023';
       end if;
`;

/**
 * add_flow's insert of its steps (a plpgsql `return query`; `steps`, `trace_id`, `span_id` and
 * `trace_flags` the arguments of function `fn`): `nextId` draws each step's id. As ADD_FLOW_CHECK, part
 * of two migrations' functions.
 */
export const addFlowInsert = (s: string, jobs: string, nextId: string, fn: string) => `       return query
       with ided as materialized (
         select s.step, s.ord, s.step ->> 'ref' as ref, ${nextId} as id
         from jsonb_array_elements(steps) with ordinality as s(step, ord)
       ),
       flow as (select min(i.id) as flow_id, count(*)::int as n from ided i),
       deps as (
         select distinct i.id as job_id, i.ref as job_ref, d.value as dependency_ref, q.id as dependency_id, coalesce(i.step ->> 'onDependencyFailure', 'fail') as policy
         from ided i cross join lateral jsonb_array_elements_text(coalesce(i.step -> 'dependsOn', '[]'::jsonb)) d(value)
         join ided q on q.ref = d.value
       ),
       pending as (select job_id, count(*)::int as n from deps group by job_id),
       made as (insert into ${s}.flows (id, unfinished) select flow_id, n from flow),
       edges as (
         insert into ${s}.job_dependencies (job_id, job_ref, dependency_ref, dependency_id, flow_id, policy)
         select d.job_id, d.job_ref, d.dependency_ref, d.dependency_id, f.flow_id, d.policy from deps d cross join flow f
       ),
       queues as (
         insert into ${s}.job_queues (queue_name) select distinct i.step ->> 'queueName' from ided i where i.step ->> 'queueName' is not null
         on conflict do nothing
       ),
       roots as (
         insert into ${s}.jobs (id, task_identifier, payload, queue_name, run_at, max_attempts, priority, flags,
           trace_id, span_id, trace_flags, flow_id, flow_ref)
         overriding system value
         select i.id, i.step ->> 'identifier', coalesce(i.step -> 'payload', '{}'::jsonb), i.step ->> 'queueName',
           coalesce((i.step ->> 'runAt')::timestamptz, now()), coalesce((i.step ->> 'maxAttempts')::int, 25), coalesce((i.step ->> 'priority')::int, 0),
           coalesce(array(select jsonb_array_elements_text(i.step -> 'flags')), '{}'), ${fn}.trace_id, ${fn}.span_id, ${fn}.trace_flags,
           f.flow_id, i.ref
         from ided i cross join flow f
         where not exists (select 1 from pending p where p.job_id = i.id)
         returning id, run_at, created_at
       ),
       waiting as (
         insert into ${s}.blocked_jobs (id, task_identifier, payload, queue_name, run_at, max_attempts, priority, flags,
           trace_id, span_id, trace_flags, flow_id, flow_ref, pending)
         select i.id, i.step ->> 'identifier', coalesce(i.step -> 'payload', '{}'::jsonb), i.step ->> 'queueName',
           (i.step ->> 'runAt')::timestamptz, coalesce((i.step ->> 'maxAttempts')::int, 25), coalesce((i.step ->> 'priority')::int, 0),
           coalesce(array(select jsonb_array_elements_text(i.step -> 'flags')), '{}'), ${fn}.trace_id, ${fn}.span_id, ${fn}.trace_flags,
           f.flow_id, i.ref, p.n
         from ided i cross join flow f join pending p on p.job_id = i.id
         returning id, run_at, created_at
       ),
       notified as (select pg_notify('${jobs}', '') from roots r where r.run_at <= now() limit 1)
       -- joined as the CTE itself (at most one row), never as an aggregate of it: a join to a subquery
       -- known to give one row whose columns go unused is removed by the planner, and the NOTIFY with it
       select i.ref, i.id, w.id is not null, coalesce(r.run_at, w.run_at), coalesce(r.created_at, w.created_at)
       from ided i left join roots r on r.id = i.id left join waiting w on w.id = i.id
       left join notified on true
       order by i.ord;
`;

/**
 * settle_flow_jobs's count of the edges its `settled` CTE updated, by dependent, into
 * `v_dependents`, `v_counts` and `v_doomed` (returning when none waits). As ADD_FLOW_CHECK, part of
 * two migrations' functions.
 */
export const COUNT_SETTLED = `       counted as (select job_id, count(*)::int as n, bool_or(fails) as fails from settled group by job_id)
       select array_agg(job_id order by job_id), array_agg(n order by job_id), array_agg(job_id order by job_id) filter (where fails)
       into v_dependents, v_counts, v_doomed
       from counted;
       if v_dependents is null then
         return;
       end if;
`;

/**
 * reopen_flow_jobs once it knows the retried jobs (`job_ids`) and the dependency-failed jobs to
 * bring back with them (`v_chain`): counts the blocked dependents up, sets the edges waiting
 * again, moves `v_chain` to blocked_jobs and counts the flows up (plpgsql statements, with
 * `v_flows` and `v_counts`). As ADD_FLOW_CHECK, part of two migrations' functions
 * (Flows1764300000000's, FlowRetryKeepsFailures1765400000000's).
 */
export const reopenChain = (s: string) => `       perform 1 from ${s}.blocked_jobs b
       where b.id in (select e.job_id from ${s}.job_dependencies e where e.dependency_id = any(job_ids || coalesce(v_chain, '{}'))) order by b.id for update;
       update ${s}.blocked_jobs b set pending = b.pending + c.n
       from (select e.job_id, count(*)::int as n from ${s}.job_dependencies e
             where e.dependency_id = any(job_ids || coalesce(v_chain, '{}')) and e.state is not null group by e.job_id) c
       where b.id = c.job_id;
       update ${s}.job_dependencies e set state = null, result = null, error = null, settled_at = null
       where e.dependency_id = any(job_ids || coalesce(v_chain, '{}')) and e.state is not null;
       if v_chain is not null then
         with gone as (delete from ${s}.finished_jobs f where f.id = any(v_chain) returning f.*)
         insert into ${s}.blocked_jobs (id, task_identifier, queue_name, payload, priority, run_at, max_attempts, flags, flow_id, flow_ref, pending, created_at)
         select g.id, g.task_identifier, g.queue_name, g.payload, g.priority, null, g.max_attempts, g.flags, g.flow_id, g.flow_ref,
           (select count(*) from ${s}.job_dependencies e where e.job_id = g.id and e.state is null), g.created_at
         from gone g;
       end if;
       select array_agg(flow_id order by flow_id), array_agg(n order by flow_id) into v_flows, v_counts
       from (select j.flow_id, count(*)::int as n from (
               select flow_id from ${s}.jobs where id = any(job_ids) and flow_id is not null
               union all select flow_id from ${s}.blocked_jobs where id = any(coalesce(v_chain, '{}'))) j
             group by j.flow_id) c;
       if v_flows is not null then
         perform 1 from ${s}.flows f where f.id = any(v_flows) order by f.id for update;
         update ${s}.flows f set unfinished = f.unfinished + c.n, state = 'running', finished_at = null, updated_at = now()
         from unnest(v_flows, v_counts) as c(id, n)
         where f.id = c.id;
       end if;
`;

/**
 * settle_flow_jobs's move of its ready jobs (`v_ready`) from blocked_jobs to jobs, waking the
 * workers on channel `jobs` (plpgsql statements, counting into `v_woken`). As ADD_FLOW_CHECK,
 * part of two migrations' functions (Flows1764300000000's, FlowSettleLinear1765300000000's).
 */
export const moveReadyJobs = (s: string, jobs: string) => `         with moved as (delete from ${s}.blocked_jobs b where b.id = any(v_ready) returning b.*),
         queues as (
           insert into ${s}.job_queues (queue_name) select distinct m.queue_name from moved m where m.queue_name is not null
           on conflict do nothing
         ),
         added as (
           insert into ${s}.jobs (id, task_identifier, queue_name, payload, priority, run_at, max_attempts, flags,
             trace_id, span_id, trace_flags, flow_id, flow_ref, created_at)
           overriding system value
           select m.id, m.task_identifier, m.queue_name, m.payload, m.priority, coalesce(m.run_at, now()), m.max_attempts, m.flags,
             m.trace_id, m.span_id, m.trace_flags, m.flow_id, m.flow_ref, m.created_at
           from moved m
           returning run_at
         )
         select count(*) into v_woken from (select pg_notify('${jobs}', '') from added where run_at <= now() limit 1) woken;
`;

/**
 * The statement of createFlowFunctions that creates function `name`, as migration 7 wrote it: what a
 * later migration's down() puts back, or derives its own from.
 */
export function flowFunctionStatement(schema: string, name: string): string {
  const s = quoteIdentifier(schema);
  const statement = createFlowFunctions(schema).find((text) => text.includes(`function ${s}.${name}(`));
  if (!statement) throw new Error(`migration 7 creates no function ${name}`);
  return statement;
}

/**
 * The SQL functions of flows (migration Flows1764300000000) that settle and add them, as
 * statements (those that act on request: 1764300000000-flow-admin-functions.ts). Written here
 * once, as they were with this migration: a later change writes a new migration.
 */
export function createFlowFunctions(schema: string): string[] {
  const s = quoteIdentifier(schema);
  const literal = (text: string) => text.replace(/'/g, "''");
  const jobs = literal(jobsChannel(schema));
  const finished = literal(finishedChannel(schema));
  const events = literal(eventsChannel(schema));
  const sequence = literal(`${s}.jobs`);
  const nextId = `nextval(pg_get_serial_sequence('${sequence}', 'id'))`;
  /** "Some live listener wants events of type `type` (an expression) for task `task`." */
  const wanted = (type: string, task: string) => `
    exists (select 1 from ${s}.event_listeners l where l.expires_at > now() and (l.filter -> ${type} = 'true'::jsonb or l.filter -> ${type} ? ${task}))`;

  return [
    // The flow jobs a statement finished (or, from the sweep, finished unseen): each is recorded on
    // the edges that wait for it, and its dependents are counted down under their row locks. A
    // dependent whose count reaches zero moves to jobs (and workers are woken); one with a failed
    // or cancelled dependency under the `fail` policy fails, with every blocked job that waits on
    // it by `fail` edges, down the graph. Their insert into finished_jobs settles their own edges
    // in turn (this trigger again, one level down).
    `create or replace function ${s}.settle_flow_jobs(done bigint[]) returns void
     language plpgsql volatile as $fn$
     declare
       v_dependents bigint[];
       v_counts integer[];
       v_doomed bigint[];
       v_ready bigint[];
       v_woken integer;
     begin
       with settled as (
         update ${s}.job_dependencies e
         set state = coalesce(f.state, 'cancelled'), result = f.result, error = f.last_error, settled_at = now()
         from unnest(done) as d(id) left join ${s}.finished_jobs f on f.id = d.id
         where e.dependency_id = d.id and e.state is null
         returning e.job_id, coalesce(f.state, 'cancelled') <> 'completed' and e.policy = 'fail' as fails
       ),
${COUNT_SETTLED}       if v_doomed is not null then
         with recursive doomed(id) as (
           select unnest(v_doomed)
           union
           select e.job_id from ${s}.job_dependencies e join doomed d on e.dependency_id = d.id where e.policy = 'fail' and e.state is null
         )
         select array_agg(id order by id) into v_doomed from doomed;
       end if;
       -- One lock order (by id) for every transaction that settles: none waits for another in a circle.
       perform 1 from ${s}.blocked_jobs b where b.id = any(v_dependents || coalesce(v_doomed, '{}')) order by b.id for update;
       -- Under those locks this statement reads the latest counts: the jobs whose last dependencies
       -- these are move at once (their count is never written), the others are counted down.
       select array_agg(b.id) filter (where b.pending <= c.n) into v_ready
       from ${s}.blocked_jobs b join unnest(v_dependents, v_counts) as c(id, n) on b.id = c.id
       where not (b.id = any(coalesce(v_doomed, '{}')));
       update ${s}.blocked_jobs b set pending = b.pending - c.n
       from unnest(v_dependents, v_counts) as c(id, n)
       where b.id = c.id and not (b.id = any(coalesce(v_doomed, '{}'))) and not (b.id = any(coalesce(v_ready, '{}')));
       if v_doomed is not null then
         with gone as (delete from ${s}.blocked_jobs b where b.id = any(v_doomed) returning b.*)
         insert into ${s}.finished_jobs (${FINISHED_COLUMNS})
         select ${finishedOfBlocked(
           'g',
           `'failed'`,
           `'JQ_DEPENDENCY_FAILED: ' || coalesce((
              select string_agg(e.dependency_ref || case when e.state = 'cancelled' then ' was cancelled' else ' failed' end, ', ' order by e.dependency_ref)
              from ${s}.job_dependencies e
              where e.job_id = g.id and e.policy = 'fail' and (e.state in ('failed', 'cancelled') or e.dependency_id = any(v_doomed))), 'a dependency failed')`,
         )}
         from gone g;
       end if;
       if v_ready is not null then
${moveReadyJobs(s, jobs)}       end if;
     end;
     $fn$`,

    // Flows whose last job finished: their state (a failed or cancelled job that no dependent
    // took in its stride decides it), waiters told on the finished channel (by flow id), and
    // the flow:* event for whoever listens.
    `create or replace function ${s}.finish_flows(flow_ids bigint[]) returns void
     language plpgsql volatile as $fn$
     declare
       v_told integer;
     begin
       with judged as (
         update ${s}.flows f set
           state = case
             when exists (select 1 from ${s}.finished_jobs m where m.flow_id = f.id and m.state = 'failed' and not (${absorbed(s, 'm')})) then 'failed'
             when exists (select 1 from ${s}.finished_jobs m where m.flow_id = f.id and m.state = 'cancelled' and not (${absorbed(s, 'm')})) then 'cancelled'
             else 'completed' end,
           finished_at = now(), updated_at = now()
         where f.id = any(flow_ids) and f.state = 'running'
         returning f.id, f.state, f.created_at
       ),
       described as (
         select j.*, coalesce((select t.task_identifier from ${s}.finished_jobs t where t.id = j.id), '') as task,
           'flow:' || j.state as type,
           (select coalesce(json_agg(distinct m.flow_ref), '[]'::json) from ${s}.finished_jobs m
             where m.flow_id = j.id and m.state in ('failed', 'cancelled') and not (${absorbed(s, 'm')})) as refs
         from judged j
       ),
       told as (select pg_notify('${finished}', string_agg(id::text, ',')) from judged having count(*) > 0),
       published as (
         select pg_notify('${events}', '{"at":' || floor(date_part('epoch', now()) * 1000)::int8 || ',"events":[' ||
           json_build_array(d.type, d.id::text, d.task, null, 0, 0, floor(date_part('epoch', d.created_at) * 1000)::int8, d.refs)::text || ']}')
         from described d
         where ${wanted('d.type', 'd.task')}
       )
       select (select count(*) from told) + (select count(*) from published) into v_told;
     end;
     $fn$`,

    // After each statement that inserted into finished_jobs: settle the flow jobs among the rows,
    // then count their flows down under the flows' row locks; the one that reaches zero finishes
    // its flow. Rows of jobs added alone (no flow_id) cost a scan of the transition table only.
    `create or replace function ${s}.flow_jobs_finished() returns trigger
     language plpgsql volatile as $fn$
     declare
       v_done bigint[];
       v_flows bigint[];
       v_counts integer[];
       v_finished bigint[];
     begin
       select array_agg(id order by id) into v_done from new_rows where flow_id is not null;
       if v_done is null then
         return null;
       end if;
       perform ${s}.settle_flow_jobs(v_done);
       select array_agg(flow_id order by flow_id), array_agg(n order by flow_id) into v_flows, v_counts
       from (select flow_id, count(*)::int as n from new_rows where flow_id is not null group by flow_id) c;
       perform 1 from ${s}.flows f where f.id = any(v_flows) order by f.id for update;
       with counted as (
         update ${s}.flows f set unfinished = f.unfinished - c.n, updated_at = now()
         from unnest(v_flows, v_counts) as c(id, n)
         where f.id = c.id
         returning f.id, f.unfinished
       )
       select array_agg(id) filter (where unfinished <= 0) into v_finished from counted;
       if v_finished is not null then
         perform ${s}.finish_flows(v_finished);
       end if;
       return null;
     end;
     $fn$`,

    // Jobs of flows moved back to jobs by retry_jobs: their dependents that failed because of them
    // (JQ_DEPENDENCY_FAILED, down the graph) go back to blocked_jobs, dependents still blocked
    // wait for them again, and their flows run again.
    `create or replace function ${s}.reopen_flow_jobs(job_ids bigint[]) returns void
     language plpgsql volatile as $fn$
     declare
       v_chain bigint[];
       v_flows bigint[];
       v_counts integer[];
     begin
       with recursive reopened(id) as (
         select unnest(job_ids)
         union
         select e.job_id from ${s}.job_dependencies e join reopened r on e.dependency_id = r.id
         join ${s}.finished_jobs f on f.id = e.job_id and f.state = 'failed' and f.last_error like 'JQ_DEPENDENCY_FAILED:%'
       )
       select array_agg(id order by id) filter (where not (id = any(job_ids))) into v_chain from reopened;
${reopenChain(s)}     end;
     $fn$`,

    // A flow in one statement (addFlow, or SQL: a trigger may start flows). Steps are the JSON
    // array addFlow sends: {ref, identifier, payload?, dependsOn?, onDependencyFailure?,
    // queueName?, runAt?, priority?, maxAttempts?, flags?}, each depending only on steps before
    // it (so a flow has no cycle). The flow's id is its first job's. Returns each step's job.
    `create or replace function ${s}.add_flow(steps jsonb, trace_id uuid default null, span_id bigint default null, trace_flags smallint default null)
     returns table (ref text, id bigint, blocked boolean, run_at timestamptz, created_at timestamptz)
     language plpgsql volatile as $fn$
     #variable_conflict use_column
     declare
       v_problem text;
     begin
${ADD_FLOW_CHECK}${addFlowInsert(s, jobs, nextId, 'add_flow')}     end;
     $fn$`,

  ];
}
