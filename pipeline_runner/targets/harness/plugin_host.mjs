// The trusted host side of a binloop-generated Hanzo bot plugin (written by binloop, not
// by a designer): register(api) with an api of the real plugin API's shape (the members
// a tool plugin may use; nothing the bot lacks), and the one tool it registers. Used by
// serve_plugin.mjs, the sandboxed worker of both the acceptance run and the tool host,
// so that tests and agents load a plugin exactly the same way.
//
// A tool that calls another tool gets that call from the host through the module's
// `binloopHost(invoke)` export (binloop's own contract; the bot never sees it).

const SILENT = { info() {}, warn() {}, error() {}, debug() {} };

function checkConfigSchema(schema) {
  if (!schema || typeof schema !== "object") throw new Error("configSchema must be a validator object");
  if (typeof schema.safeParse === "function") {
    const result = schema.safeParse(undefined);
    if (!result || result.success !== true) throw new Error("configSchema rejects an absent config");
  } else if (typeof schema.validate === "function") {
    const result = schema.validate(undefined);
    if (!result || result.ok !== true) throw new Error("configSchema rejects an absent config");
  } else if (typeof schema.parse !== "function") {
    throw new Error("configSchema has no safeParse, parse or validate (a raw JSON Schema is not a validator)");
  }
}

// The tool the plugin module registers through `api.registerTool`; `invoke` (when
// given) is how that tool calls another one.
export function registerPlugin(module, invoke, logger = SILENT) {
  const plugin = module?.default ?? module;
  if (!plugin || typeof plugin !== "object" || typeof plugin.register !== "function") {
    throw new Error("the module's default export must be a plugin definition with register(api)");
  }
  checkConfigSchema(plugin.configSchema);
  if (typeof module?.binloopHost === "function") module.binloopHost(invoke);
  const tools = [];
  const api = {
    id: plugin.id, name: plugin.name, description: plugin.description, source: "binloop",
    pluginConfig: {}, logger, resolvePath: (input) => input,
    registerTool(tool) { tools.push(typeof tool === "function" ? tool({}) : tool); },
  };
  const result = plugin.register(api);
  if (result && typeof result.then === "function") {
    throw new Error("register(api) returned a promise; the bot ignores async registration");
  }
  if (tools.length !== 1 || !tools[0]) {
    throw new Error(`register(api) must register exactly one tool (it registered ${tools.length})`);
  }
  return tools[0];
}
