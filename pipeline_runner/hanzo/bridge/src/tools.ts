// Gated tools without a restart. The bot resolves plugin tools by calling each plugin's
// tool factory when it assembles an agent run's tool list (resolvePluginTools: at the
// start of every agent run, i.e. every inbound message/turn); plugins themselves are
// never reloaded. The bridge's factory reads the library's manifest at that moment and
// returns a proxy for each active (stable or probationary) tool, whose execute forwards
// to the sandboxed tool host. So a tool gated during a run becomes visible to the agent
// at its next run; a quarantined one disappears then, and the host refuses it at once.
// A tool that wraps another (its tool.json's `invokes`) may call that one tool of the
// bot, through the bot's POST /tools/invoke in the run's session (host_client.ts).
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { gatewayInvoker, toolHost, type GatewayTarget } from "./host_client.ts";

type Manifest = { version: number; tools: Record<string, { name: string; status: string; path: string; version: number }> };
type ProxyTool = {
  name: string; label: string; description: string; parameters: Record<string, unknown>;
  execute: (toolCallId: string, params: unknown, signal?: AbortSignal) => Promise<{ content: Array<{ type: "text"; text: string }>; details: unknown }>;
};

type Offered = { name: string; description: string; parameters: Record<string, unknown>; invokes: string[] };

const ACTIVE = new Set(["stable", "probationary"]);

export class LibraryTools {
  private cached: { key: string; tools: Offered[] } | null = null;

  readonly library: string;
  readonly python: string;
  readonly gateway: GatewayTarget;

  constructor(library: string, python: string, gateway: GatewayTarget) {
    this.library = library;
    this.python = python;
    this.gateway = gateway;
  }

  private manifestKey(): string | null {
    try {
      const st = statSync(join(this.library, "manifest.json"));
      return `${st.ino}:${st.mtimeMs}:${st.size}`;
    } catch {
      return null;
    }
  }

  invalidate(): void {
    this.cached = null;
    void toolHost(this.python, this.library).reload().catch(() => {});
  }

  // The proxies for one agent run (`sessionKey`: the run's session, for invokes).
  active(sessionKey?: string): ProxyTool[] {
    const host = toolHost(this.python, this.library);
    return this.offered().map(({ name, description, parameters, invokes }) => ({
      name,
      label: name.replace(/_/g, " "),
      description,
      parameters,
      execute: (_id, params, signal) => host.call(name, params && typeof params === "object" ? params as Record<string, unknown> : {}, signal,
        invokes.length > 0 ? { tools: invokes, run: gatewayInvoker(this.gateway, sessionKey) } : undefined),
    }));
  }

  private offered(): Offered[] {
    const key = this.manifestKey();
    if (key === null) return [];
    if (this.cached && this.cached.key === key) return this.cached.tools;
    let manifest: Manifest;
    try {
      manifest = JSON.parse(readFileSync(join(this.library, "manifest.json"), "utf8")) as Manifest;
    } catch {
      return this.cached?.tools ?? [];
    }
    const tools: Offered[] = [];
    for (const entry of Object.values(manifest.tools ?? {})) {
      if (!ACTIVE.has(entry.status)) continue;
      let meta: Record<string, unknown> = {};
      try {
        meta = JSON.parse(readFileSync(join(this.library, entry.path, "tool.json"), "utf8")) as Record<string, unknown>;
      } catch {
        continue;
      }
      tools.push({
        name: entry.name,
        description: String(meta.description ?? `binloop tool ${entry.name}`),
        parameters: (meta.input_schema as Record<string, unknown>) ?? { type: "object" },
        invokes: Array.isArray(meta.invokes) ? meta.invokes.filter((n): n is string => typeof n === "string") : [],
      });
    }
    this.cached = { key, tools };
    return tools;
  }
}
