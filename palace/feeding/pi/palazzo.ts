/**
 * palazzo inside pi: the palace's tools, the wake-up context and transcript feeding for the pi coding agent.
 *
 * Installed by `palazzo install-hooks pi` into <agent dir>/extensions/palazzo.ts (the palazzo command
 * below is written in at install time). No npm dependencies: pi loads this file with jiti, and the MCP
 * client it needs (JSON-RPC over a child's stdio, or Streamable HTTP with fetch) is the few requests below.
 *
 * - Transport, decided once at load: with PALAZZO_URL it speaks Streamable HTTP to that server (with
 *   PALAZZO_TOKEN) and spawns nothing; a server that cannot be reached leaves the session without palace
 *   tools and one line on stderr, never a local palace (fail-closed). Otherwise it spawns `palazzo runmcp`.
 * - Every palazzo tool is registered with its real inputSchema.
 * - The wake-up context (the snapshot the Claude Code hook reads, via `palazzo hook pi`) is injected
 *   before the first agent turn of a fresh session, not of a resumed one.
 * - The session's own transcript is fed on a debounced agent_end and at session_shutdown, through
 *   `palazzo hook pi` (the spool: the runmcp this extension holds feeds it, else a detached feeder);
 *   triggers that overlap coalesce.
 * - Requests are bounded: PALAZZO_PI_HANDSHAKE_TIMEOUT_MS (default 60 s), PALAZZO_PI_CALL_TIMEOUT_MS
 *   (default 30 s). A stalled runmcp is killed and the call fails with a clear error; the next call
 *   respawns it after a capped exponential backoff (0.25 s doubling to 8 s), reset by any success.
 * - PALAZZO_PI_DEBUG=1 shows the server's stderr.
 */

import { type ChildProcess, execFile, spawn } from "node:child_process";

const PALAZZO_COMMAND = process.env.PALAZZO_COMMAND || "__PALAZZO_COMMAND__";
const HANDSHAKE_MS = Number(process.env.PALAZZO_PI_HANDSHAKE_TIMEOUT_MS || 60_000);
const CALL_MS = Number(process.env.PALAZZO_PI_CALL_TIMEOUT_MS || 30_000);
const FEED_DEBOUNCE_MS = Number(process.env.PALAZZO_PI_FEED_DEBOUNCE_MS || 5_000);
const HOOK_MS = 10_000;
const DEBUG = process.env.PALAZZO_PI_DEBUG === "1";
const PROTOCOL_VERSION = "2025-06-18";
const CLIENT_INFO = { name: "pi", version: "palazzo-extension-1" };
const BACKOFF_FIRST_MS = 250;
const BACKOFF_MAX_MS = 8_000;

type Json = any;

interface Transport {
	request(method: string, params: Json, timeoutMs: number): Promise<Json>;
	notify(method: string, params: Json): Promise<void>;
	close(): void;
}

function say(line: string): void {
	process.stderr.write(`palazzo: ${line}\n`);
}

class RpcError extends Error {}

/** `palazzo runmcp` as a child: newline-delimited JSON-RPC on its stdin/stdout. */
class StdioTransport implements Transport {
	private child: ChildProcess | null = null;
	private buffer = "";
	private nextId = 1;
	private pending = new Map<number, { resolve: (value: Json) => void; reject: (error: Error) => void }>();

	start(): void {
		const child = spawn(PALAZZO_COMMAND, ["runmcp"], { stdio: ["pipe", "pipe", DEBUG ? "inherit" : "ignore"] });
		this.child = child;
		child.stdout?.setEncoding("utf8");
		child.stdout?.on("data", (chunk: string) => this.receive(chunk));
		const gone = (why: string) => {
			if (this.child === child) this.child = null;
			this.failAll(new RpcError(`palazzo runmcp ${why}`));
		};
		child.on("error", (error) => gone(`could not start (${PALAZZO_COMMAND}): ${error.message}`));
		child.on("exit", (code, signal) => gone(`exited (${signal ?? code})`));
	}

	get alive(): boolean {
		return this.child !== null && this.child.exitCode === null && !this.child.killed;
	}

	private receive(chunk: string): void {
		this.buffer += chunk;
		let newline = this.buffer.indexOf("\n");
		while (newline >= 0) {
			const line = this.buffer.slice(0, newline).trim();
			this.buffer = this.buffer.slice(newline + 1);
			newline = this.buffer.indexOf("\n");
			if (!line) continue;
			let message: Json;
			try {
				message = JSON.parse(line);
			} catch {
				continue;
			}
			const waiter = typeof message?.id === "number" ? this.pending.get(message.id) : undefined;
			if (!waiter) continue; // a server request or notification: nothing this client needs
			this.pending.delete(message.id);
			if (message.error) waiter.reject(new RpcError(message.error.message ?? "error"));
			else waiter.resolve(message.result);
		}
	}

	private failAll(error: Error): void {
		for (const waiter of this.pending.values()) waiter.reject(error);
		this.pending.clear();
	}

	request(method: string, params: Json, timeoutMs: number): Promise<Json> {
		const child = this.child;
		if (!child || !this.alive) return Promise.reject(new RpcError("palazzo runmcp is not running"));
		const id = this.nextId++;
		return new Promise((resolve, reject) => {
			const timer = setTimeout(() => {
				this.pending.delete(id);
				// A stalled server would hold every later call too: stop it; the next call starts a new one.
				this.close();
				reject(new RpcError(`palazzo did not answer ${method} within ${timeoutMs / 1000} s; it was stopped`));
			}, timeoutMs);
			this.pending.set(id, {
				resolve: (value) => {
					clearTimeout(timer);
					resolve(value);
				},
				reject: (error) => {
					clearTimeout(timer);
					reject(error);
				},
			});
			child.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", id, method, params })}\n`);
		});
	}

	async notify(method: string, params: Json): Promise<void> {
		this.child?.stdin?.write(`${JSON.stringify({ jsonrpc: "2.0", method, params })}\n`);
	}

	close(): void {
		const child = this.child;
		this.child = null;
		if (child && child.exitCode === null) child.kill("SIGKILL");
		this.failAll(new RpcError("palazzo runmcp was stopped"));
	}
}

/** A team server's /mcp over Streamable HTTP: each request a POST, answered as JSON or as an SSE stream. */
class HttpTransport implements Transport {
	private session: string | null = null;
	private nextId = 1;

	constructor(
		private readonly url: string,
		private readonly token: string | undefined,
	) {}

	private headers(): Record<string, string> {
		const headers: Record<string, string> = {
			"Content-Type": "application/json",
			Accept: "application/json, text/event-stream",
			"MCP-Protocol-Version": PROTOCOL_VERSION,
		};
		if (this.token) headers.Authorization = `Bearer ${this.token}`;
		if (this.session) headers["Mcp-Session-Id"] = this.session;
		return headers;
	}

	async request(method: string, params: Json, timeoutMs: number): Promise<Json> {
		const id = this.nextId++;
		let response: Response;
		try {
			response = await fetch(this.url, {
				method: "POST",
				headers: this.headers(),
				body: JSON.stringify({ jsonrpc: "2.0", id, method, params }),
				signal: AbortSignal.timeout(timeoutMs),
			});
		} catch (error: Json) {
			const cause = error?.cause?.code ?? error?.cause?.message ?? error?.message ?? String(error);
			throw new RpcError(`cannot reach ${this.url}: ${cause}`);
		}
		if (response.status === 401 || response.status === 403) {
			throw new RpcError(`${this.url} refused the token (HTTP ${response.status})`);
		}
		if (!response.ok) throw new RpcError(`${this.url} answered HTTP ${response.status}`);
		this.session = response.headers.get("mcp-session-id") ?? this.session;
		const body = await response.text();
		const messages = (response.headers.get("content-type") ?? "").includes("text/event-stream")
			? body
					.split("\n")
					.filter((line) => line.startsWith("data:"))
					.map((line) => JSON.parse(line.slice(5)))
			: [JSON.parse(body)];
		const answer = messages.find((message) => message?.id === id);
		if (!answer) throw new RpcError(`${this.url} sent no answer to ${method}`);
		if (answer.error) throw new RpcError(answer.error.message ?? "error");
		return answer.result;
	}

	async notify(method: string, params: Json): Promise<void> {
		await fetch(this.url, {
			method: "POST",
			headers: this.headers(),
			body: JSON.stringify({ jsonrpc: "2.0", method, params }),
			signal: AbortSignal.timeout(CALL_MS),
		}).catch(() => undefined);
	}

	close(): void {}
}

/** One MCP session with palazzo; a local runmcp that died or stalled is started again, after a backoff. */
class Palace {
	private transport: Transport | null = null;
	private starting: Promise<Transport> | null = null;
	private failures = 0;
	private notBefore = 0;

	constructor(private readonly remote: { url: string; token?: string } | null) {}

	private async connect(): Promise<Transport> {
		const wait = this.notBefore - Date.now();
		if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
		const transport = this.remote ? new HttpTransport(this.remote.url, this.remote.token) : new StdioTransport();
		if (transport instanceof StdioTransport) transport.start();
		await transport.request(
			"initialize",
			{ protocolVersion: PROTOCOL_VERSION, capabilities: {}, clientInfo: CLIENT_INFO },
			HANDSHAKE_MS,
		);
		await transport.notify("notifications/initialized", {});
		return transport;
	}

	private async ready(): Promise<Transport> {
		if (this.transport && (!(this.transport instanceof StdioTransport) || this.transport.alive)) {
			return this.transport;
		}
		this.transport = null;
		if (!this.starting) {
			this.starting = this.connect().finally(() => {
				this.starting = null;
			});
		}
		try {
			this.transport = await this.starting;
			return this.transport;
		} catch (error) {
			this.failed();
			throw error;
		}
	}

	private failed(): void {
		this.failures += 1;
		this.notBefore = Date.now() + Math.min(BACKOFF_FIRST_MS * 2 ** (this.failures - 1), BACKOFF_MAX_MS);
	}

	async request(method: string, params: Json, timeoutMs = CALL_MS): Promise<Json> {
		const transport = await this.ready();
		try {
			const result = await transport.request(method, params, timeoutMs);
			this.failures = 0;
			this.notBefore = 0;
			return result;
		} catch (error) {
			this.failed();
			throw error;
		}
	}

	async tools(): Promise<Json[]> {
		const listed = await this.request("tools/list", {}, HANDSHAKE_MS);
		return Array.isArray(listed?.tools) ? listed.tools : [];
	}

	close(): void {
		this.transport?.close();
		this.transport = null;
	}
}

/** `palazzo hook pi` with one event on stdin: the same wake-up snapshot and spool the Claude Code hook uses. */
function hook(event: Record<string, Json>): Promise<string> {
	return new Promise((resolve) => {
		const child = execFile(PALAZZO_COMMAND, ["hook", "pi"], { timeout: HOOK_MS }, (error, stdout, stderr) => {
			if (stderr && (DEBUG || error)) process.stderr.write(stderr);
			resolve(error ? "" : stdout);
		});
		child.stdin?.end(JSON.stringify(event));
	});
}

function sessionFile(ctx: Json): string | undefined {
	try {
		return ctx?.sessionManager?.getSessionFile?.() ?? undefined;
	} catch {
		return undefined;
	}
}

function sessionId(ctx: Json): string | undefined {
	try {
		return ctx?.sessionManager?.getSessionId?.() ?? undefined;
	} catch {
		return undefined;
	}
}

function hasConversation(ctx: Json): boolean {
	try {
		const entries = ctx?.sessionManager?.getEntries?.() ?? [];
		return entries.some((entry: Json) => entry?.type === "message");
	} catch {
		return false;
	}
}

function textOf(result: Json): string {
	const blocks = Array.isArray(result?.content) ? result.content : [];
	return blocks
		.filter((block: Json) => block?.type === "text")
		.map((block: Json) => block.text)
		.join("\n");
}

export default async function palazzo(pi: Json): Promise<void> {
	const url = process.env.PALAZZO_URL?.trim();
	const remote = url ? { url: `${url.replace(/\/+$/, "")}/mcp`, token: process.env.PALAZZO_TOKEN } : null;
	const palace = new Palace(remote);
	let tools: Json[] = [];
	try {
		tools = await palace.tools();
	} catch (error: Json) {
		palace.close();
		say(`${remote ? `the palace at ${url}` : "palazzo runmcp"} is unavailable (${error?.message ?? error}): this session has no palace tools`);
		if (remote) return; // fail-closed: never a local palace instead of the team's
	}
	for (const tool of tools) {
		pi.registerTool({
			name: tool.name,
			label: tool.title ?? tool.name,
			description: tool.description ?? tool.name,
			parameters: tool.inputSchema ?? { type: "object", properties: {} },
			async execute(_toolCallId: string, params: Json) {
				const result = await palace.request("tools/call", { name: tool.name, arguments: params ?? {} });
				const text = textOf(result);
				if (result?.isError) throw new Error(text || `${tool.name} failed`);
				return { content: [{ type: "text", text }], details: {} };
			},
		});
	}

	let woken = false;
	let fresh = true;
	pi.on("session_start", async (event: Json, ctx: Json) => {
		woken = false;
		fresh = event?.reason !== "resume" && event?.reason !== "fork" && !hasConversation(ctx);
	});
	pi.on("before_agent_start", async (_event: Json, ctx: Json) => {
		if (woken || !fresh) return;
		woken = true;
		const output = await hook({ hook_event_name: "SessionStart", source: "startup", cwd: ctx?.cwd, session_id: sessionId(ctx) });
		let context = "";
		try {
			context = JSON.parse(output)?.hookSpecificOutput?.additionalContext ?? "";
		} catch {
			return;
		}
		if (!context) return;
		return { message: { customType: "palazzo-wake-up", content: context, display: false } };
	});

	// Feeding: a debounced agent_end and the shutdown, one `palazzo hook` at a time, overlapping triggers coalesced.
	let timer: ReturnType<typeof setTimeout> | null = null;
	let running: Promise<void> | null = null;
	let again: { name: string; ctx: Json } | null = null;
	const feed = async (name: string, ctx: Json): Promise<void> => {
		if (running) {
			again = { name: again?.name === "SessionEnd" ? "SessionEnd" : name, ctx };
			return running;
		}
		const path = sessionFile(ctx);
		if (!path) return;
		running = hook({ hook_event_name: name, transcript_path: path, cwd: ctx?.cwd, session_id: sessionId(ctx) }).then(() => {
			running = null;
		});
		await running;
		if (again) {
			const next = again;
			again = null;
			await feed(next.name, next.ctx);
		}
	};
	pi.on("agent_end", async (_event: Json, ctx: Json) => {
		if (timer) clearTimeout(timer);
		timer = setTimeout(() => {
			timer = null;
			void feed("Stop", ctx);
		}, FEED_DEBOUNCE_MS);
	});
	pi.on("session_shutdown", async (_event: Json, ctx: Json) => {
		if (timer) clearTimeout(timer);
		timer = null;
		await feed("SessionEnd", ctx);
		palace.close();
	});
}
