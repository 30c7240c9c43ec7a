// The Hanzo bot's plugin contract, as binloop checks generated plugins against it.
//
// Every declaration marked `restated` is the text of hanzoai/bot's src/plugins/types.ts
// (or src/agents/tools/common.ts for AnyAgentTool), unchanged; tests/test_hanzo_types.py
// compares them with the bot's source at test time. `BotPluginApi` restates only the
// members a tool plugin may use (each member's text unchanged): a plugin checked against
// it uses nothing the bot lacks. The only names binloop adds are the two aliases at the
// end, for the package `openclaw`'s names of the same types. A generated plugin imports
// from "openclaw/plugin-sdk/core"; binloop type-checks it twice: against the real
// `openclaw` package, and with that specifier mapped to this file (the bot's contract).
import type { AgentTool } from "@mariozechner/pi-agent-core";

// restated: src/agents/tools/common.ts
export type AnyAgentTool = AgentTool<any, unknown> & {
  ownerOnly?: boolean;
};

// restated
export type PluginLogger = {
  debug?: (message: string) => void;
  info: (message: string) => void;
  warn: (message: string) => void;
  error: (message: string) => void;
};

// restated
export type PluginConfigUiHint = {
  label?: string;
  help?: string;
  tags?: string[];
  advanced?: boolean;
  sensitive?: boolean;
  placeholder?: string;
};

// restated
export type PluginKind = "memory" | "context-engine";

// restated
export type PluginConfigValidation =
  | { ok: true; value?: unknown }
  | { ok: false; errors: string[] };

// restated
export type OpenClawPluginConfigSchema = {
  safeParse?: (value: unknown) => {
    success: boolean;
    data?: unknown;
    error?: {
      issues?: Array<{ path: Array<string | number>; message: string }>;
    };
  };
  parse?: (value: unknown) => unknown;
  validate?: (value: unknown) => PluginConfigValidation;
  uiHints?: Record<string, PluginConfigUiHint>;
  jsonSchema?: Record<string, unknown>;
};

// restated
export type OpenClawPluginToolOptions = {
  name?: string;
  names?: string[];
  optional?: boolean;
};

// restated (members)
export type BotPluginApi = {
  id: string;
  name: string;
  version?: string;
  description?: string;
  source: string;
  pluginConfig?: Record<string, unknown>;
  logger: PluginLogger;
  resolvePath: (input: string) => string;
  registerTool: (
    tool: AnyAgentTool,
    opts?: OpenClawPluginToolOptions,
  ) => void;
};

// restated
export type OpenClawPluginDefinition = {
  id?: string;
  name?: string;
  description?: string;
  version?: string;
  kind?: PluginKind;
  configSchema?: OpenClawPluginConfigSchema;
  register?: (api: BotPluginApi) => void | Promise<void>;
  activate?: (api: BotPluginApi) => void | Promise<void>;
};

// binloop: the package `openclaw` calls the bot's BotPluginApi OpenClawPluginApi.
export type OpenClawPluginApi = BotPluginApi;
