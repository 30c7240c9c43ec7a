// binloop offline tool: call a tool behind a guard that knows its crashes (RUNTIME).
import { errorText, isObject, normalize, sameJson, type InvokeTool, type Obj } from "./_common.ts"; // binloop:inline

const NAME: string = "template"; // binloop:fill
const DESCRIPTION: string = "template"; // binloop:fill
const ANSWERS: Record<string, string> = {}; // binloop:fill
const INPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const OUTPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const CONFIG: Obj = { tool: "", signatures: [], crashing: [] }; // binloop:fill

export async function answer(params: Obj, invoke?: InvokeTool, signal?: AbortSignal): Promise<Obj> {
  return evaluate(CONFIG, params, invoke, signal);
}

function advice(tool: string, signature: string): string {
  return `${tool} fails this way (${signature}) on such input; change the arguments rather than retrying`;
}

export async function evaluate(config: Obj, params: Obj, invoke?: InvokeTool, signal?: AbortSignal): Promise<Obj> {
  const args = params["args"];
  const tool = String(config["tool"]);
  const base = { ok: false, known_failure: false, skipped: true };
  if (!isObject(args)) return { ...base, error: "args must be an object" };
  if (!invoke) return { ...base, error: `no invoker: the host must let this tool call ${tool}` };
  for (const known of config["crashing"] as Array<{ args: unknown; signature: string }>) {
    if (sameJson(known.args, args)) {
      return { ...base, known_failure: true, signature: known.signature, error: `these arguments made ${tool} fail before`, advice: advice(tool, known.signature) };
    }
  }
  try {
    const result = await invoke(tool, args, signal);
    return { ok: true, known_failure: false, skipped: false, result };
  } catch (error) {
    const message = errorText(error);
    const signature = normalize(message);
    const knownFailure = (config["signatures"] as string[]).includes(signature);
    return { ok: false, known_failure: knownFailure, skipped: false, signature, error: message, advice: knownFailure ? advice(tool, signature) : "a new failure" };
  }
}

void ANSWERS; void OUTPUT_SCHEMA;
