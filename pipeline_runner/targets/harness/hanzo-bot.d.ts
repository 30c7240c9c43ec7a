// Type declarations of the Hanzo bot plugin interface that binloop's generated plugins
// are checked against (`tsc --strict --noEmit`). Shipped by binloop; keep in step with
// the bot's plugin SDK. `invokeTool` is a host capability binloop's tools use to call the
// tool they guard (retry, background run, alias); hosts without it leave it undefined.

export type JsonSchema = { [key: string]: unknown };

export interface TextContent {
  type: "text";
  text: string;
}

export interface ToolResult<TDetails = unknown> {
  content: TextContent[];
  details: TDetails;
}

export interface AgentTool<TParams = Record<string, unknown>, TDetails = unknown> {
  name: string;
  label: string;
  description: string;
  parameters: JsonSchema;
  execute(toolCallId: string, params: TParams, signal?: AbortSignal): Promise<ToolResult<TDetails>>;
}

export type InvokeTool = (
  tool: string,
  params: Record<string, unknown>,
  signal?: AbortSignal,
) => Promise<unknown>;

export interface PluginLogger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
  debug(message: string): void;
}

export interface BotPluginApi {
  id: string;
  name: string;
  config: Record<string, unknown>;
  pluginConfig: unknown;
  logger: PluginLogger;
  registerTool(tool: AgentTool<any, any>): void;
  invokeTool?: InvokeTool;
}

export interface BotPlugin {
  id: string;
  name: string;
  description: string;
  configSchema: JsonSchema;
  register(api: BotPluginApi): void;
}
