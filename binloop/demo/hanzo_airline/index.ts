// The mock airline of `binloop demo` as a Hanzo bot plugin: the same three tools, data
// and error texts as binloop/agent/airline.py (tau-bench's airline shapes). A failed call
// throws; its message starts with the failure mode (`ARGS.payment_total_mismatch: ...`),
// which the bridge takes as the record's failure_mode when failureModePrefix is on.
import type { AnyAgentTool, OpenClawPluginApi, OpenClawPluginDefinition } from "openclaw/plugin-sdk/core";

const BAG_FEE = 50;
const INSURANCE_PER_PASSENGER = 30;
type Flight = { flight_number: string; prices: Record<string, number> };
const FLIGHTS: Record<string, Flight[]> = {
  "JFK-SEA": [{ flight_number: "HAT136", prices: { economy: 125, business: 410 } },
              { flight_number: "HAT039", prices: { economy: 130, business: 395 } }],
  "DTW-SEA": [{ flight_number: "HAT097", prices: { economy: 180, business: 520 } }],
  "ORD-ATL": [{ flight_number: "HAT223", prices: { economy: 99, business: 310 } }],
  "LAX-BOS": [{ flight_number: "HAT045", prices: { economy: 215, business: 640 } }],
  "SFO-PHX": [{ flight_number: "HAT181", prices: { economy: 88, business: 260 } }],
  "MIA-DEN": [{ flight_number: "HAT302", prices: { economy: 142, business: 455 } }],
};
type User = { certificate: string; balance: number; card: string };
const USERS: Record<string, User> = {
  mia_li_3668: { certificate: "certificate_7504069", balance: 250, card: "credit_card_4421486" },
  ivan_muller_7015: { certificate: "certificate_8998287", balance: 300, card: "credit_card_7238816" },
  sofia_kim_7287: { certificate: "certificate_5921432", balance: 200, card: "credit_card_3012555" },
  omar_davis_3817: { certificate: "certificate_2640119", balance: 150, card: "credit_card_8811430" },
  yara_silva_9722: { certificate: "certificate_4408122", balance: 100, card: "credit_card_6094351" },
  chen_lee_6825: { certificate: "certificate_1193050", balance: 150, card: "credit_card_5120934" },
  anya_garcia_5901: { certificate: "certificate_9950124", balance: 200, card: "credit_card_2291877" },
};
type Args = Record<string, unknown>;

function fail(mode: string, message: string): never {
  throw new Error(`${mode}: ${message}`);
}

function total(args: Args): number {
  const fares = new Map<string, Record<string, number>>();
  for (const flights of Object.values(FLIGHTS)) for (const f of flights) fares.set(f.flight_number, f.prices);
  const cabin = String(args.cabin ?? "economy");
  const passengers = Array.isArray(args.passengers) ? args.passengers : [];
  let sum = 0;
  for (const flight of (Array.isArray(args.flights) ? args.flights : []) as Args[]) {
    const prices = fares.get(String(flight.flight_number));
    if (!prices || !(cabin in prices)) fail("NOTFOUND.flight", `Error: flight ${String(flight.flight_number)} not found`);
    sum += prices[cabin]! * passengers.length;
  }
  sum += BAG_FEE * Number(args.nonfree_baggages ?? 0);
  if (args.insurance === "yes") sum += INSURANCE_PER_PASSENGER * passengers.length;
  return sum;
}

const reservations = new Map<string, Args>();

function book(args: Args): Record<string, unknown> {
  const user = USERS[String(args.user_id)];
  if (!user) fail("NOTFOUND.user", `Error: user ${String(args.user_id)} not found`);
  const due = total(args);
  const payments = args.payment_methods;
  if (!Array.isArray(payments) || payments.length === 0) fail("ARGS.payment_methods", "Error: payment_methods is required");
  for (const p of payments as Args[]) {
    if (!p || typeof p.amount !== "number") fail("ARGS.payment_methods", "Error: each payment needs payment_id and amount");
    if (p.payment_id !== user.certificate && p.payment_id !== user.card) fail("NOTFOUND.payment_method", `Error: payment method ${String(p.payment_id)} not found`);
    if (p.payment_id === user.certificate && p.amount > user.balance) fail("CONFLICT.insufficient_balance", `Error: not enough balance in payment method ${user.certificate}`);
  }
  const paid = (payments as Args[]).reduce((s, p) => s + Number(p.amount), 0);
  if (paid !== due) fail("ARGS.payment_total_mismatch", `Error: payment amount does not add up, total price is ${due}, but paid ${paid}`);
  const id = `R${String(reservations.size + 1).padStart(5, "0")}`;
  reservations.set(id, { ...args, total: due });
  return { reservation_id: id, total: due, status: "confirmed" };
}

function tool(name: string, description: string, run: (args: Args) => unknown, latencyMs: number): AnyAgentTool {
  return {
    name, label: name.replace(/_/g, " "), description, parameters: { type: "object" },
    async execute(_id: string, params: unknown) {
      if (latencyMs) await new Promise((resolve) => setTimeout(resolve, latencyMs));
      const details = run(params && typeof params === "object" ? params as Args : {});
      return { content: [{ type: "text" as const, text: JSON.stringify(details) }], details };
    },
  };
}

const plugin: OpenClawPluginDefinition = {
  id: "binloop-demo-airline",
  name: "binloop demo airline",
  description: "The mock airline of binloop demo",
  configSchema: { safeParse: (value: unknown) => ({ success: true, data: value }) },
  register(api: OpenClawPluginApi): void {
    const latency = Number((api.pluginConfig as Args | undefined)?.latencyMs ?? 0);
    api.registerTool(tool("search_direct_flight", "Direct flights between two airports on a date", (a) => {
      const flights = FLIGHTS[`${String(a.origin)}-${String(a.destination)}`];
      if (!flights) fail("NOTFOUND.flight", `Error: no direct flight from ${String(a.origin)} to ${String(a.destination)}`);
      return flights.map((f) => ({ ...f, date: a.date }));
    }, latency));
    api.registerTool(tool("get_quote", "The total price of a booking: fares, checked-bag fees and insurance", (a) => ({ total: total(a) }), latency));
    api.registerTool(tool("book_reservation", "Book a reservation; the payments must add up to the quoted total", book, latency));
  },
};

export default plugin;
