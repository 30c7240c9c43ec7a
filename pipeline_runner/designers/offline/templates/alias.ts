// binloop offline tool: a missing tool, answered by the existing tool it stands for (TOOL_GAP).
import { errorText, type InvokeTool, type Obj } from "./_common.ts"; // binloop:inline

const NAME: string = "template"; // binloop:fill
const DESCRIPTION: string = "template"; // binloop:fill
const ANSWERS: Record<string, string> = {}; // binloop:fill
const INPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const OUTPUT_SCHEMA: Obj = { type: "object" }; // binloop:fill
const CONFIG: Obj = { tool: "", alias: "" }; // binloop:fill

export async function answer(params: Obj, invoke?: InvokeTool, signal?: AbortSignal): Promise<Obj> {
  const alias = String(CONFIG["alias"]);
  if (!invoke) return { ok: false, via: alias, error: `no invoker: the host must let this tool call ${alias}` };
  try {
    return { ok: true, via: alias, result: await invoke(alias, params, signal) };
  } catch (error) {
    return { ok: false, via: alias, error: errorText(error) };
  }
}

void ANSWERS; void OUTPUT_SCHEMA;
