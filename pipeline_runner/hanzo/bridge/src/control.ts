// Pause and resume of a session, within what the host allows: a plugin cannot stop the
// agent loop or retry a call, but its before_tool_call hook may block a call with a
// reason. While bin.control.{session}.pause holds (from the pause request until
// bin.control.{session}.resume, or `resumeTimeoutMs` as a safety net), every tool call
// of that session is blocked with a reason that says why and that it will pass again.
// The pause request is answered with what the bridge knows of the session (its recent
// tool calls); that state comes back in the resume checkpoint.
import type { NatsConnection } from "./publisher.ts";
import { subjectToken } from "./subjects.ts";

export const BLOCK_PREFIX = "binloop: paused";

type Paused = { since: number; builds: Set<string> };

export class SessionControl {
  private paused = new Map<string, Paused>();
  private recent = new Map<string, Array<{ tool: string; ok: boolean; ts: number }>>();
  onRegistryUpdated: (notice: unknown) => void = () => {};

  readonly prefix: string;
  readonly registrySubject: string;
  readonly resumeTimeoutMs: number;
  readonly log: { info: (m: string) => void; warn: (m: string) => void };

  constructor(prefix: string, registrySubject: string, resumeTimeoutMs = 300_000,
              log: { info: (m: string) => void; warn: (m: string) => void } = console) {
    this.prefix = prefix;
    this.registrySubject = registrySubject;
    this.resumeTimeoutMs = resumeTimeoutMs;
    this.log = log;
  }

  isPaused(session: string): boolean {
    const token = subjectToken(session);
    const state = this.paused.get(token);
    if (!state) return false;
    if (Date.now() - state.since > this.resumeTimeoutMs) {
      this.log.warn(`binloop bridge: no resume for session ${session} after ${this.resumeTimeoutMs} ms; going on`);
      this.paused.delete(token);
      return false;
    }
    return true;
  }

  blockReason(session: string): string {
    return `${BLOCK_PREFIX}: binloop is building a tool for a recurring failure in session ${session}; `
      + "tool calls of this session are held until it resumes (seconds to minutes); try the call again then";
  }

  noteCall(session: string, tool: string, ok: boolean): void {
    const token = subjectToken(session);
    const calls = this.recent.get(token) ?? [];
    calls.push({ tool, ok, ts: Date.now() });
    if (calls.length > 20) calls.shift();
    this.recent.set(token, calls);
    if (this.recent.size > 1000) this.recent.delete(this.recent.keys().next().value as string);
  }

  pause(token: string, request: Record<string, unknown>): Record<string, unknown> {
    const build = String(request.build_id ?? request.event_id ?? "unknown");
    const state = this.paused.get(token) ?? { since: Date.now(), builds: new Set<string>() };
    state.builds.add(build);
    this.paused.set(token, state);
    this.log.info(`binloop bridge: session ${token} paused by build ${build}`);
    return { paused: true, by: "binloop-bridge", session: token, recent_calls: this.recent.get(token) ?? [] };
  }

  resume(token: string, checkpoint: Record<string, unknown>): void {
    const state = this.paused.get(token);
    if (!state) return;
    const build = checkpoint.build_id;
    if (typeof build === "string") state.builds.delete(build);
    else state.builds.clear();
    if (state.builds.size === 0) {
      this.paused.delete(token);
      this.log.info(`binloop bridge: session ${token} resumed`);
    }
  }

  async subscribe(nc: NatsConnection): Promise<void> {
    const decoder = new TextDecoder();
    const parse = (data: Uint8Array): Record<string, unknown> => {
      try {
        const value = JSON.parse(decoder.decode(data)) as unknown;
        return value && typeof value === "object" && !Array.isArray(value) ? value as Record<string, unknown> : {};
      } catch {
        return {};
      }
    };
    const tokenOf = (subject: string, action: string): string =>
      subject.slice(this.prefix.length + 1, subject.length - action.length - 1);
    const pauses = nc.subscribe(`${this.prefix}.*.pause`);
    const resumes = nc.subscribe(`${this.prefix}.*.resume`);
    const registry = nc.subscribe(this.registrySubject);
    void (async () => {
      for await (const msg of pauses) {
        const answer = this.pause(tokenOf(msg.subject, "pause"), parse(msg.data));
        if (msg.reply) msg.respond(new TextEncoder().encode(JSON.stringify(answer)));
      }
    })();
    void (async () => {
      for await (const msg of resumes) this.resume(tokenOf(msg.subject, "resume"), parse(msg.data));
    })();
    void (async () => {
      for await (const msg of registry) this.onRegistryUpdated(parse(msg.data));
    })();
  }
}
