// binloop offline tool: run a slow tool call in the background and poll it (TIMEOUT).
import { errorText, isNumber, isObject, type InvokeTool, type Obj } from "./_common.ts"; // binloop:inline

const NAME: string = "template"; // binloop:fill
const DESCRIPTION: string = "template"; // binloop:fill
const ANSWERS: Record<string, string> = {}; // binloop:fill
const INPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const OUTPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const CONFIG: Obj = { tool: "", wait_ms: 1000 }; // binloop:fill

type Job = { done: boolean; result?: unknown; error?: string; finished: Promise<void> };
const JOBS = new Map<string, Job>();
let nextId = 1;

export async function answer(params: Obj, invoke?: InvokeTool, signal?: AbortSignal): Promise<Obj> {
  return evaluate(CONFIG, params, invoke, signal);
}

function report(jobId: string, job: Job): Obj {
  if (!job.done) return { ok: true, status: "running", job_id: jobId };
  if (job.error !== undefined) return { ok: false, status: "failed", job_id: jobId, error: job.error };
  return { ok: true, status: "done", job_id: jobId, result: job.result ?? null };
}

async function waitFor(job: Job, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<void>((resolve) => { timer = setTimeout(resolve, ms); });
  await Promise.race([job.finished, timeout]);
  clearTimeout(timer);
}

export async function evaluate(config: Obj, params: Obj, invoke?: InvokeTool, signal?: AbortSignal): Promise<Obj> {
  const waitMs = "wait_ms" in params ? params["wait_ms"] : config["wait_ms"];
  const wait = isNumber(waitMs) ? Math.min(Math.max(waitMs, 0), 600000) : 1000;
  const jobId = params["job_id"];
  if (typeof jobId === "string") {
    const job = JOBS.get(jobId);
    if (!job) return { ok: false, status: "unknown", job_id: jobId, error: "no such job" };
    await waitFor(job, wait);
    return report(jobId, job);
  }
  const args = params["args"];
  const tool = String(config["tool"]);
  if (!isObject(args)) return { ok: false, status: "failed", error: "give args (an object) or a job_id" };
  if (!invoke) return { ok: false, status: "failed", error: `no invoker: the host must let this tool call ${tool}` };
  const id = `job-${nextId++}`;
  const job: Job = { done: false, finished: Promise.resolve() };
  job.finished = Promise.resolve().then(() => invoke(tool, args, signal)).then(
    (result) => { job.result = result; job.done = true; },
    (error: unknown) => { job.error = errorText(error); job.done = true; },
  );
  JOBS.set(id, job);
  await waitFor(job, wait);
  return report(id, job);
}

void ANSWERS; void OUTPUT_SCHEMA;
