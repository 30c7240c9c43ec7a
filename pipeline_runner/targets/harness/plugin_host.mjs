// The trusted host side of a binloop-generated Hanzo bot plugin (written by binloop, not
// by a designer): register(api) with a host api, and the one tool it registers. Used by
// serve_plugin.mjs, the sandboxed worker of both the acceptance run and the tool host,
// so that tests and agents load a plugin exactly the same way.

const SILENT = { info() {}, warn() {}, error() {}, debug() {} };

// The tool a plugin registers through `api.registerTool`; `invoke` becomes
// `api.invokeTool` (how a generated tool calls the tool it guards), when given.
export function registerPlugin(plugin, invoke, logger = SILENT) {
  const tools = [];
  const api = {
    id: plugin.id, name: plugin.name, config: {}, pluginConfig: {}, logger,
    registerTool(tool) { tools.push(tool); },
  };
  if (invoke) api.invokeTool = invoke;
  plugin.register(api);
  if (tools.length !== 1) {
    throw new Error(`register(api) must register exactly one tool (it registered ${tools.length})`);
  }
  return tools[0];
}
