// Records out of the bot without ever blocking it: queued by after_tool_call, sent by a
// timer. With NATS: JetStream publishes on telemetry.{session}.{tool} in batch envelopes
// of one tool (header Binloop-Batch: jsonl, Nats-Msg-Id = sha256 of the records' ids, as
// binloop's publisher does). While NATS is down, records go to a size-bounded local JSONL
// buffer, replayed on reconnect one record per message with Nats-Msg-Id = the record's
// id (so a record replayed twice is stored once); what the bound drops is counted and
// logged. Without NATS (JSONL-only mode) every record is appended to a file.
import { appendFileSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, unlinkSync } from "node:fs";
import { createHash } from "node:crypto";
import { dirname } from "node:path";
import { pathToFileURL } from "node:url";
import type { TelemetryRecord } from "./record.ts";
import { subjectToken } from "./subjects.ts";

export type Logger = { info: (m: string) => void; warn: (m: string) => void; error: (m: string) => void };

export type PublisherOptions = {
  natsUrl?: string;
  natsUser?: string;
  natsPass?: string;
  natsToken?: string;
  natsTls?: { caFile?: string; certFile?: string; keyFile?: string };
  natsModule?: string;
  subjectPrefix: string;
  jsonlPath?: string;
  bufferPath: string;
  bufferMaxBytes: number;
  batchMax: number;
  flushMs: number;
};

// The subset of the `nats` package this uses.
type Nats = {
  connect: (opts: Record<string, unknown>) => Promise<NatsConnection>;
  headers: () => { set: (k: string, v: string) => void };
};
export type NatsConnection = {
  jetstream: () => { publish: (subject: string, data: Uint8Array, opts: Record<string, unknown>) => Promise<unknown> };
  subscribe: (subject: string, opts?: Record<string, unknown>) => AsyncIterable<NatsMsg> & { unsubscribe: () => void };
  status: () => AsyncIterable<{ type: string }>;
  isClosed: () => boolean;
  drain: () => Promise<void>;
  close: () => Promise<void>;
};
export type NatsMsg = { subject: string; data: Uint8Array; reply?: string; respond: (data?: Uint8Array) => boolean };

export async function loadNats(natsModule?: string): Promise<Nats> {
  const mod = (natsModule
    ? await import(pathToFileURL(`${natsModule}/index.js`).href)
    : await import("nats")) as Record<string, unknown>;
  return (typeof mod.connect === "function" ? mod : mod.default) as Nats;
}

export class Publisher {
  private queue: TelemetryRecord[] = [];
  private timer: NodeJS.Timeout | null = null;
  private sending: Promise<void> | null = null;
  nc: NatsConnection | null = null;
  private nats: Nats | null = null;
  connected = false;
  counters = { queued: 0, published: 0, buffered: 0, replayed: 0, dropped: 0, jsonl: 0 };
  private encoder = new TextEncoder();

  readonly options: PublisherOptions;
  readonly log: Logger;

  constructor(options: PublisherOptions, log: Logger) {
    this.options = options;
    this.log = log;
  }

  async start(): Promise<NatsConnection | null> {
    this.timer = setInterval(() => void this.flush(), this.options.flushMs);
    this.timer.unref();
    if (!this.options.natsUrl) return null;
    this.nats = await loadNats(this.options.natsModule);
    const opts: Record<string, unknown> = {
      servers: this.options.natsUrl.split(",").map((s) => s.trim()).filter(Boolean),
      name: "binloop-bridge", reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: 500,
      waitOnFirstConnect: true, timeout: 2000,
    };
    if (this.options.natsUser) opts.user = this.options.natsUser;
    if (this.options.natsPass) opts.pass = this.options.natsPass;
    if (this.options.natsToken) opts.token = this.options.natsToken;
    if (this.options.natsTls) opts.tls = { ...this.options.natsTls };
    // Connect in the background: the bot starts (and records go to the buffer) meanwhile.
    const connecting = this.nats.connect(opts).then((nc) => {
      this.nc = nc;
      this.connected = true;
      void this.watch(nc);
      this.log.info(`binloop bridge: connected to NATS ${this.options.natsUrl}`);
      return nc;
    }, (error: unknown) => {
      this.log.error(`binloop bridge: NATS connect failed: ${String(error)}`);
      return null;
    });
    return connecting;
  }

  private async watch(nc: NatsConnection): Promise<void> {
    for await (const status of nc.status()) {
      if (status.type === "disconnect") {
        this.connected = false;
        this.log.warn("binloop bridge: NATS disconnected; buffering records locally");
      } else if (status.type === "reconnect") {
        this.connected = true;
        this.log.info("binloop bridge: NATS reconnected; replaying the local buffer");
        void this.flush();
      }
    }
  }

  enqueue(record: TelemetryRecord): void {
    this.queue.push(record);
    this.counters.queued += 1;
    if (this.queue.length >= this.options.batchMax) void this.flush();
  }

  flush(): Promise<void> {
    if (this.sending) return this.sending;
    this.sending = this.send().finally(() => { this.sending = null; });
    return this.sending;
  }

  private async send(): Promise<void> {
    const batch = this.queue.splice(0, this.queue.length);
    if (this.options.jsonlPath && batch.length) this.append(this.options.jsonlPath, batch, false);
    if (!this.options.natsUrl) return;
    if (!this.nc || !this.connected || this.nc.isClosed()) {
      if (batch.length) this.bufferRecords(batch);
      return;
    }
    try {
      await this.replayBuffer();
      await this.publishEnvelopes(batch);
    } catch (error) {
      this.log.warn(`binloop bridge: publish failed (${String(error)}); buffering locally`);
      this.bufferRecords(batch);
    }
  }

  private async publishEnvelopes(records: TelemetryRecord[]): Promise<void> {
    const byTool = new Map<string, TelemetryRecord[]>();
    for (const record of records) {
      const group = byTool.get(record.tool) ?? [];
      group.push(record);
      byTool.set(record.tool, group);
    }
    const js = this.nc!.jetstream();
    const sent: Promise<unknown>[] = [];
    for (const [tool, group] of byTool) {
      for (let i = 0; i < group.length; i += this.options.batchMax) {
        const part = group.slice(i, i + this.options.batchMax);
        const ids = part.map((r) => r.id);
        const h = this.nats!.headers();
        h.set("Binloop-Batch", "jsonl");
        const subject = `${this.options.subjectPrefix}.${subjectToken(part[0]!.session_id)}.${subjectToken(tool)}`;
        const payload = this.encoder.encode(part.map((r) => JSON.stringify(r)).join("\n") + "\n");
        const msgID = createHash("sha256").update(ids.join("\n")).digest("hex");
        sent.push(js.publish(subject, payload, { msgID, headers: h, timeout: 5000 }));
      }
    }
    await Promise.all(sent);
    this.counters.published += records.length;
  }

  private async replayBuffer(): Promise<void> {
    const path = this.options.bufferPath;
    if (!existsSync(path)) return;
    const replaying = `${path}.replaying`;
    if (!existsSync(replaying)) renameSync(path, replaying);
    const lines = readFileSync(replaying, "utf8").split("\n").filter(Boolean);
    const js = this.nc!.jetstream();
    for (const line of lines) {
      let record: TelemetryRecord;
      try {
        record = JSON.parse(line) as TelemetryRecord;
      } catch {
        this.counters.dropped += 1;
        this.log.warn("binloop bridge: a damaged line of the local buffer was dropped");
        continue;
      }
      const subject = `${this.options.subjectPrefix}.${subjectToken(record.session_id)}.${subjectToken(record.tool)}`;
      await js.publish(subject, this.encoder.encode(`${line}\n`), { msgID: record.id, timeout: 5000 });
      this.counters.replayed += 1;
    }
    unlinkSync(replaying);
    if (lines.length) this.log.info(`binloop bridge: replayed ${lines.length} buffered records`);
  }

  private bufferRecords(records: TelemetryRecord[]): void {
    this.append(this.options.bufferPath, records, true);
  }

  private append(path: string, records: TelemetryRecord[], bounded: boolean): void {
    try {
      mkdirSync(dirname(path), { recursive: true });
      let size = existsSync(path) ? statSync(path).size : 0;
      const lines: string[] = [];
      let dropped = 0;
      for (const record of records) {
        const line = `${JSON.stringify(record)}\n`;
        const bytes = Buffer.byteLength(line);
        if (bounded && size + bytes > this.options.bufferMaxBytes) {
          dropped += 1;
          continue;
        }
        size += bytes;
        lines.push(line);
      }
      if (lines.length) appendFileSync(path, lines.join(""));
      if (bounded) {
        this.counters.buffered += lines.length;
        if (dropped) {
          this.counters.dropped += dropped;
          this.log.warn(`binloop bridge: local buffer ${path} is full (${this.options.bufferMaxBytes} bytes): dropped ${dropped} records (${this.counters.dropped} so far)`);
        }
      } else {
        this.counters.jsonl += lines.length;
      }
    } catch (error) {
      this.counters.dropped += records.length;
      this.log.error(`binloop bridge: cannot write ${path}: ${String(error)}; dropped ${records.length} records`);
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.flush();
    if (this.nc && !this.nc.isClosed()) await this.nc.drain().catch(() => {});
  }
}
