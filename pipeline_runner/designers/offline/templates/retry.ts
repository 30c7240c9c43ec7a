// binloop offline tool: call a tool with retries and exponential back-off (NETWORK).
import { errorText, isNumber, isObject, normalize, sleep, type InvokeTool, type Obj } from "./_common.ts"; // binloop:inline

const NAME: string = "template"; // binloop:fill
const DESCRIPTION: string = "template"; // binloop:fill
const ANSWERS: Record<string, string> = {}; // binloop:fill
const INPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const OUTPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const CONFIG: Obj = { tool: "", transient: [], max_attempts: 4, base_delay_ms: 200, max_delay_ms: 5000 }; // binloop:fill

export async function answer(params: Obj, invoke?: InvokeTool, signal?: AbortSignal): Promise<Obj> {
  return evaluate(CONFIG, params, invoke, signal);
}

function transient(config: Obj, message: string): boolean {
  const text = normalize(message);
  return (config["transient"] as string[]).some((pattern) => text.includes(pattern));
}

function setting(params: Obj, config: Obj, name: string, low: number, high: number): number {
  const value = name in params ? params[name] : config[name];
  return isNumber(value) ? Math.trunc(Math.min(Math.max(value, low), high)) : Math.trunc(config[name] as number);
}

export async function evaluate(config: Obj, params: Obj, invoke?: InvokeTool, signal?: AbortSignal): Promise<Obj> {
  const args = params["args"];
  const tool = String(config["tool"]);
  if (!isObject(args)) return { ok: false, attempts: 0, retryable: false, error: "args must be an object" };
  if (!invoke) return { ok: false, attempts: 0, retryable: false, error: `no invoker: the host must let this tool call ${tool}` };
  const attempts = setting(params, config, "max_attempts", 1, 10);
  const delay = setting(params, config, "base_delay_ms", 0, 60000);
  let error = "";
  for (let attempt = 1; attempt <= attempts; attempt++) {
    try {
      return { ok: true, attempts: attempt, result: await invoke(tool, args, signal) };
    } catch (caught) {
      error = errorText(caught);
      if (!transient(config, error)) return { ok: false, attempts: attempt, retryable: false, error };
    }
    if (attempt < attempts) await sleep(Math.min(config["max_delay_ms"] as number, delay * 2 ** (attempt - 1)), signal);
  }
  return { ok: false, attempts, retryable: true, error };
}

void ANSWERS; void OUTPUT_SCHEMA;
