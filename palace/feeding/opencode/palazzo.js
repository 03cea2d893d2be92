/**
 * palazzo inside opencode: the wake-up context in the system prompt, and every session fed to the palace.
 *
 * Installed by `palazzo install-hooks opencode` into <config dir>/plugins/palazzo.js (the palazzo command
 * below is written in at install time); the palace's tools come from the MCP server the same install
 * registers in opencode.json (`mcp.palazzo`), not from this file. Plain JavaScript with no imports beyond
 * Node's: opencode loads it as it is, and it needs nothing from npm.
 *
 * - Wake-up: when a session is created (or first prompted, for a continued one) `palazzo hook opencode`
 *   gets a SessionStart event on stdin and answers with the wake-up context, which is added to the system
 *   prompt of every request of that session (opencode rebuilds the system prompt for each request and
 *   never stores it, so the first request has it and the later ones keep it, unchanged for prompt caching).
 *   Not for subagent sessions, nor for opencode's title generator.
 * - Feeding: on `session.idle` (the turn settled) a Stop event queues '<opencode.db>#<session id>' in
 *   palazzo's spool (the palace's holder, which outlives opencode for a while, feeds it); when the process
 *   exits (`opencode run`), a SessionEnd for every session that had a turn in it marks it ended, and a
 *   feeder takes over if the holder went too. The TUI runs plugins in a worker it stops without an exit
 *   event: there, the Stop of each settled turn is all. A deleted session is forgotten (nothing to feed).
 * - Nothing here may break opencode: every failure is swallowed and written to opencode's log (through its
 *   client's app.log); PALAZZO_OPENCODE_DEBUG=1 also prints it, and the hook's stderr, on stderr.
 */

import { execFile, spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { isAbsolute, join } from "node:path";

const PALAZZO_COMMAND = process.env.PALAZZO_COMMAND || "__PALAZZO_COMMAND__";
const HARNESS = "opencode";
const HOOK_MS = 10_000;
// Spent while opencode exits (the hook only writes a spool file): short, and once per session.
const END_MS = 5_000;
const DEBUG = process.env.PALAZZO_OPENCODE_DEBUG === "1";
// opencode's title agent goes through the same system transform; a title needs no memory.
const TITLE_PROMPT = "You are a title generator";

/** Sessions that had a turn in this process, ended (SessionEnd) when it exits: id -> hook event. */
const toEnd = new Map();
let exitHooked = false;

function say(client, message) {
	if (DEBUG) process.stderr.write(`palazzo: ${message}\n`);
	try {
		const logged = client?.app?.log?.({ body: { service: "palazzo", level: "warn", message } });
		if (logged && typeof logged.catch === "function") logged.catch(() => undefined);
	} catch {
		// the log is a courtesy; opencode goes on without it
	}
}

/** opencode's database: OPENCODE_DB, else <data dir>/opencode.db (another channel's build: opencode-<channel>.db). */
function databasePath(env = process.env) {
	const data = join(env.XDG_DATA_HOME || join(homedir(), ".local", "share"), "opencode");
	const configured = env.OPENCODE_DB;
	if (configured) {
		if (configured === ":memory:") return null;
		return isAbsolute(configured) ? configured : join(data, configured);
	}
	const standard = join(data, "opencode.db");
	if (existsSync(standard)) return standard;
	try {
		const channels = readdirSync(data)
			.filter((name) => name.startsWith("opencode-") && name.endsWith(".db"))
			.map((name) => join(data, name))
			.sort((left, right) => statSync(right).mtimeMs - statSync(left).mtimeMs);
		return channels[0] ?? standard;
	} catch {
		return standard;
	}
}

/** `palazzo hook opencode` with one event on stdin; its stdout, or "" when it failed (said in the log). */
function hook(client, event) {
	return new Promise((resolve) => {
		try {
			const child = execFile(PALAZZO_COMMAND, ["hook", HARNESS], { timeout: HOOK_MS }, (error, stdout, stderr) => {
				if (error) say(client, `palazzo hook ${event.hook_event_name} failed: ${error.message}`);
				else if (stderr) say(client, stderr.trim());
				resolve(error ? "" : stdout);
			});
			child.stdin?.on("error", () => undefined); // a hook that exits early closes its stdin
			child.stdin?.end(JSON.stringify(event));
		} catch (error) {
			say(client, `cannot run ${PALAZZO_COMMAND}: ${error?.message ?? error}`);
			resolve("");
		}
	});
}

function endSessions() {
	for (const event of toEnd.values()) {
		try {
			spawnSync(PALAZZO_COMMAND, ["hook", HARNESS], {
				input: JSON.stringify(event),
				timeout: END_MS,
				stdio: ["pipe", "ignore", DEBUG ? "inherit" : "ignore"],
			});
		} catch {
			// opencode is leaving; the Stop queued at the last idle is fed by the next trigger
		}
	}
	toEnd.clear();
}

function contextOf(output) {
	try {
		const context = JSON.parse(output)?.hookSpecificOutput?.additionalContext;
		return typeof context === "string" ? context : "";
	} catch {
		return "";
	}
}

// The only export: opencode calls every function a plugin module exports as a plugin.
export const PalazzoPlugin = async ({ client, directory }) => {
	/** id -> { cwd, child, wakeUp (Promise<string>), feeding (Promise|null), again (event name|null) } */
	const sessions = new Map();

	const session = (id, info) => {
		let state = sessions.get(id);
		if (!state) {
			state = { cwd: undefined, child: false, wakeUp: null, feeding: null, again: null };
			sessions.set(id, state);
		}
		if (info && typeof info === "object") {
			if (typeof info.directory === "string" && info.directory) state.cwd = info.directory;
			if (typeof info.parentID === "string" && info.parentID) state.child = true;
		}
		return state;
	};

	const wakeUp = (id, state) => {
		if (!state.wakeUp) {
			const event = { hook_event_name: "SessionStart", source: "startup", session_id: id, cwd: state.cwd ?? directory };
			state.wakeUp = hook(client, event).then(contextOf);
		}
		return state.wakeUp;
	};

	// One `palazzo hook` per session at a time; triggers arriving meanwhile coalesce into one more.
	const feed = async (id, name) => {
		const state = session(id);
		if (state.child) return; // a subagent's session is read through its parent's
		const database = databasePath();
		if (!database) return;
		const transcript = `${database}#${id}`;
		const event = { hook_event_name: name, transcript_path: transcript, session_id: id, cwd: state.cwd ?? directory };
		toEnd.set(id, { ...event, hook_event_name: "SessionEnd" });
		if (!exitHooked) {
			exitHooked = true;
			process.on("exit", endSessions);
		}
		if (state.feeding) {
			state.again = name;
			return state.feeding;
		}
		state.feeding = hook(client, event).finally(() => {
			state.feeding = null;
		});
		await state.feeding;
		if (state.again) {
			const next = state.again;
			state.again = null;
			await feed(id, next);
		}
	};

	return {
		event: async ({ event }) => {
			try {
				const properties = event?.properties ?? {};
				const id = properties.sessionID ?? properties.info?.id;
				if (typeof id !== "string" || !id) return;
				if (event.type === "session.created") {
					const state = session(id, properties.info);
					if (!state.child) void wakeUp(id, state); // ready before the first request needs it
				} else if (event.type === "session.updated") {
					session(id, properties.info);
				} else if (event.type === "session.idle") {
					// Not awaited: opencode's event delivery need not wait for palazzo's spool.
					feed(id, "Stop").catch((error) => say(client, `feeding failed: ${error?.message ?? error}`));
				} else if (event.type === "session.deleted") {
					sessions.delete(id);
					toEnd.delete(id);
				}
			} catch (error) {
				say(client, `${event?.type ?? "an event"} failed: ${error?.message ?? error}`);
			}
		},
		"experimental.chat.system.transform": async (input, output) => {
			try {
				const id = input?.sessionID;
				const system = output?.system;
				if (typeof id !== "string" || !id || !Array.isArray(system)) return;
				if (system.some((part) => typeof part === "string" && part.startsWith(TITLE_PROMPT))) return;
				const state = session(id);
				if (state.child) return;
				const context = await wakeUp(id, state);
				if (context && !system.includes(context)) system.push(context);
			} catch (error) {
				say(client, `the wake-up failed: ${error?.message ?? error}`);
			}
		},
	};
};
