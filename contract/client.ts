// A small client of nah's API written only against the types that
// openapi-typescript generates from ../openapi.json (generated.ts, made by
// `make contract`). It is not shipped: it exists so that `tsc --strict`
// proves the generated types are what a phone developer would build on.
// Change the document so that these calls no longer fit it (a field
// renamed, a status dropped, a schema loosened to unknown) and the build
// fails.

import type { components, operations } from "./generated";

type Schemas = components["schemas"];
export type Person = Schemas["Person"];
export type Moment = Schemas["Moment"];
export type Page = Schemas["Page"];
export type Connection = Schemas["Connection"];
export type ApiError = Schemas["Error"];

/** The JSON body of an operation's request. */
type RequestJSON<Op extends keyof operations> = operations[Op] extends {
  requestBody: { content: { "application/json": infer B } };
}
  ? B
  : never;

/** The JSON body of an operation's answer with status S. */
type ResponseJSON<
  Op extends keyof operations,
  S extends keyof operations[Op]["responses"],
> = operations[Op]["responses"][S] extends {
  content: { "application/json": infer B };
}
  ? B
  : never;

type FeedQuery = NonNullable<operations["getFeed"]["parameters"]["query"]>;

/** An answer with the SPEC's error body, and when to try again. */
export class NahError extends Error {
  constructor(
    readonly status: number,
    readonly body: ApiError,
    readonly retryAfterSeconds: number | null,
  ) {
    super(`${status} ${body.error.code}: ${body.error.message}`);
  }
}

export class Client {
  constructor(
    private readonly baseURL: string,
    private token: string | null = null,
  ) {}

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = {};
    if (this.token !== null) headers["Authorization"] = `Bearer ${this.token}`;
    const init: RequestInit = { method, headers };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const res = await fetch(this.baseURL + path, init);
    if (res.status === 204) return undefined as T;
    const json: unknown = await res.json();
    if (!res.ok) {
      const after = res.headers.get("Retry-After");
      throw new NahError(res.status, json as ApiError, after === null ? null : Number(after));
    }
    return json as T;
  }

  async signUp(body: RequestJSON<"signUp">): Promise<ResponseJSON<"signUp", 201>> {
    const auth = await this.call<ResponseJSON<"signUp", 201>>("POST", "/api/v1/accounts", body);
    this.token = auth.token;
    return auth;
  }

  async signIn(body: RequestJSON<"signIn">): Promise<Person> {
    const auth = await this.call<ResponseJSON<"signIn", 201>>("POST", "/api/v1/sessions", body);
    this.token = auth.token;
    return auth.person;
  }

  async signOut(): Promise<void> {
    await this.call<void>("DELETE", "/api/v1/sessions/current");
    this.token = null;
  }

  /** Posts bytes (already encrypted by the phone) and returns the new id. */
  async postMoment(bytes: Uint8Array): Promise<ResponseJSON<"postMoment", 201>["id"]> {
    let binary = "";
    for (const b of bytes) binary += String.fromCharCode(b);
    const body: RequestJSON<"postMoment"> = { body: btoa(binary) };
    const m = await this.call<ResponseJSON<"postMoment", 201>>("POST", "/api/v1/moments", body);
    return m.id;
  }

  async deleteMoment(id: Moment["id"]): Promise<void> {
    await this.call<void>("DELETE", `/api/v1/moments/${encodeURIComponent(id)}`);
  }

  /** Every moment of the feed, newest first, following the cursors. */
  async *feed(limit: NonNullable<FeedQuery["limit"]> = 30): AsyncGenerator<Moment> {
    let before: Page["next"] = null;
    do {
      const q = new URLSearchParams({ limit: String(limit) });
      if (before !== null) q.set("before", before);
      const page = await this.call<ResponseJSON<"getFeed", 200>>("GET", `/api/v1/feed?${q}`);
      yield* page.moments;
      before = page.next;
    } while (before !== null);
  }

  /** Makes an invite and returns the code to show the other person. */
  async createInvite(): Promise<ResponseJSON<"createInvite", 201>["code"]> {
    const inv = await this.call<ResponseJSON<"createInvite", 201>>("POST", "/api/v1/invites");
    return inv.code;
  }

  async redeemInvite(code: RequestJSON<"redeemInvite">["code"]): Promise<Connection> {
    return this.call<ResponseJSON<"redeemInvite", 201>>("POST", "/api/v1/connections", { code });
  }

  async connections(): Promise<Connection[]> {
    const list = await this.call<ResponseJSON<"listConnections", 200>>("GET", "/api/v1/connections");
    return list.connections;
  }

  async health(): Promise<ResponseJSON<"getHealth", 200>["status"]> {
    const h = await this.call<ResponseJSON<"getHealth", 200>>("GET", "/healthz");
    return h.status;
  }
}

// The documented statuses an app must handle, checked against the document:
// each line fails to compile if its operation stops listing the status.
export type MustHandle = [
  ResponseJSON<"postMoment", 413>,
  ResponseJSON<"postMoment", 503>,
  ResponseJSON<"postMoment", 507>,
  ResponseJSON<"signIn", 429>,
  ResponseJSON<"redeemInvite", 409>,
  ResponseJSON<"getFeed", 400>,
];
