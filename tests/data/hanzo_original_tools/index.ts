// Test plugin: "original" tools of a Hanzo bot that binloop's wrapper tools wrap. Each
// counts its calls in this bot process (globalThis, Symbol.for("binloop.test.calls")),
// so a test can see that a wrapper's invoke really ran the bot's own tool.
// fetch_url fails with the bot's error shape ({status: "error", error}, what its tool
// adapter makes of a failed call) on its first two calls, then answers; parse_report
// throws on xlsx; secret_tool and fetch_denied must never be reached by a wrapper.
type Params = Record<string, unknown>;
type Result = { content: Array<{ type: "text"; text: string }>; details: unknown };
type Api = { registerTool: (tool: { name: string; label: string; description: string; parameters: Params;
  execute: (id: string, params: unknown) => Promise<Result> }) => void };

const COUNTS = Symbol.for("binloop.test.calls");
const counts = ((globalThis as Record<symbol, unknown>)[COUNTS] ??= {}) as Record<string, number>;
const json = (details: unknown): Result => ({ content: [{ type: "text", text: JSON.stringify(details) }], details });
const object = (value: unknown): Params => (value && typeof value === "object" && !Array.isArray(value) ? value as Params : {});

const TOOLS: Record<string, (params: Params, call: number) => unknown> = {
  fetch_url: (p, call) => (call <= 2 ? { status: "error", error: "ECONNRESET while reading" } : { ok: true, url: p.url, body: "items: 3" }),
  search_direct_flight: (p) => ({ flights: [{ flight_number: "HAT001", origin: p.origin, destination: p.destination }] }),
  parse_report: (p) => {
    if (p.format === "xlsx") throw new TypeError("Cannot read properties of undefined (reading 'sheet')");
    return { report_id: p.report_id, rows: 12 };
  },
  secret_tool: () => ({ secret: "the bot's own secret" }),
  fetch_denied: () => ({ ok: true }),
};

export default {
  id: "binloop-test-originals",
  name: "binloop test originals",
  description: "tools that binloop's wrapper tests wrap",
  configSchema: { safeParse: (value: unknown) => ({ success: true, data: value }), jsonSchema: { type: "object" } },
  register(api: Api): void {
    for (const [name, run] of Object.entries(TOOLS)) {
      api.registerTool({
        name, label: name, description: `test tool ${name}`, parameters: { type: "object" },
        async execute(_id: string, params: unknown) {
          counts[name] = (counts[name] ?? 0) + 1;
          return json(run(object(params), counts[name]));
        },
      });
    }
  },
};
