/**
 * Every error code a client can be answered with, declared once: its category and what it
 * means. Lower layers throw an OrchestratorError (errors.ts) naming one of these codes; the
 * API layer maps each category to its HTTP status (api/errors.ts); docs/api.md's table is
 * held to this list by test/unit/docs.test.ts. Like containerd's errdefs, a category says
 * what the caller can do about it, not where it happened.
 */

/** The kinds of failure, each with what a caller can do about it. */
export const ERROR_CATEGORIES = {
  invalid: 'the request is wrong: the message names the field and what is expected of it',
  unauthenticated: 'no credential, or one that opens nothing',
  forbidden: 'the caller may not do this',
  not_found: "no such thing (or not one of the tenant's)",
  method_not_allowed: 'the route exists, not with this method',
  not_acceptable: 'the route cannot answer in a type the request accepts',
  conflict: 'the thing exists, but its state does not allow this now',
  gone: 'the thing existed and is over for good',
  too_large: 'a body, file or answer over its cap; nothing was kept',
  unsupported_media_type: 'a body of a type the route does not take',
  out_of_range: 'a byte range outside the file',
  action_failed: 'the guest ran the action and it failed there',
  limit: "one of the tenant's quotas is used up: retry later",
  internal: 'a bug of ours',
  guest: 'the guest failed, or broke its protocol',
  upstream: "a cluster's node failed mid-request",
  unavailable: 'the host (or cluster) cannot do it now; nothing was taken: retry later, or elsewhere',
} as const;

export type ErrorCategory = keyof typeof ERROR_CATEGORIES;

export interface ErrorCodeEntry {
  readonly category: ErrorCategory;
  readonly description: string;
}

export const ERROR_CODES = {
  invalid_request: { category: 'invalid', description: 'a field is missing or wrong (the message names it)' },
  invalid_json: { category: 'invalid', description: 'the body is not JSON, or empty where JSON is expected' },
  is_a_directory: { category: 'invalid', description: 'a file route given a directory' },
  not_a_regular_file: { category: 'invalid', description: 'a device, FIFO or socket given to a file route' },
  upload_aborted: { category: 'invalid', description: 'the client went away before the whole upload arrived' },
  invalid_mcp_request: { category: 'invalid', description: 'a POST /mcp body the MCP transport refuses' },

  missing_api_key: { category: 'unauthenticated', description: 'no API key where one is required' },
  invalid_api_key: { category: 'unauthenticated', description: 'an API key that is not one of ours' },
  expired_api_key: { category: 'unauthenticated', description: 'an API key past its expiry' },
  revoked_api_key: { category: 'unauthenticated', description: 'a revoked API key' },
  invalid_link_token: { category: 'unauthenticated', description: 'a link token that is made up, or of another session or purpose' },
  expired_link_token: { category: 'unauthenticated', description: 'a link token past its ttlSeconds' },
  revoked_link_token: { category: 'unauthenticated', description: 'a revoked link token' },
  stream_password_invalid: { category: 'unauthenticated', description: "an E2B Desktop stream URL without the stream's password, or with a wrong one" },
  invalid_port_token: { category: 'unauthenticated', description: 'a port token that is made up, or of another session or port' },
  expired_port_token: { category: 'unauthenticated', description: 'a port token past its ttlSeconds' },
  revoked_port_token: { category: 'unauthenticated', description: 'a revoked port token' },
  invalid_envd_token: { category: 'unauthenticated', description: "an E2B envd call whose X-Access-Token is not its sandbox's" },
  cluster_credential_required: { category: 'unauthenticated', description: "a request to a cluster's node that did not come from one of its gateways" },

  invalid_host: { category: 'forbidden', description: 'keyless mode: a Host header that is not a loopback name' },
  cross_origin_request: { category: 'forbidden', description: 'keyless mode: a request a web page made' },
  permission_denied: { category: 'forbidden', description: 'the guest user may not read or write that file' },

  not_found: { category: 'not_found', description: "no such session (or another tenant's)" },
  file_not_found: { category: 'not_found', description: 'no such file in the sandbox' },
  window_not_found: { category: 'not_found', description: 'a window that is not (or no longer) on the screen' },
  app_not_found: { category: 'not_found', description: 'a desktop-file id the sandbox does not have' },
  route_not_found: { category: 'not_found', description: 'no such route' },
  volume_not_found: { category: 'not_found', description: "no such volume (or another tenant's)" },
  snapshot_not_found: { category: 'not_found', description: "no such snapshot (or another tenant's)" },
  view_unknown: { category: 'not_found', description: 'a live-view token that is not one of ours' },

  method_not_allowed: { category: 'method_not_allowed', description: 'GET or DELETE /mcp: only POST is served' },
  not_acceptable: { category: 'not_acceptable', description: 'POST /mcp without accepting both JSON and an event stream' },

  human_in_control: { category: 'conflict', description: 'a person has taken the session over through a live view' },
  display_not_ready: { category: 'conflict', description: "the session's display does not answer yet: its programs start the X server (the xfce template)" },
  stream_not_started: { category: 'conflict', description: 'an E2B Desktop stream URL of a session whose stream is not started (stream.start())' },
  control_held: { category: 'conflict', description: 'takeover by a view while another view holds the session' },
  session_not_ready: { category: 'conflict', description: "the session's state does not allow this (creating, being destroyed, destroyed)" },
  already_exists: { category: 'conflict', description: 'a move onto a path that exists, without overwrite' },
  directory_not_empty: { category: 'conflict', description: 'a remove of a directory with entries, without recursive' },
  not_a_directory: { category: 'conflict', description: 'a path used as a directory that is not one' },
  process_exited: { category: 'conflict', description: 'stdin, a signal or a resize for a process that has ended' },
  stdin_closed: { category: 'conflict', description: 'standard input written after it was closed' },
  stdin_full: { category: 'conflict', description: 'the process did not read its standard input in time' },
  session_paused: { category: 'conflict', description: 'the session is paused and was created with autoResume off: resume it first' },
  session_already_paused: { category: 'conflict', description: 'a pause of a session that is paused' },
  session_not_paused: { category: 'conflict', description: 'a resume of a session that runs' },
  session_busy: { category: 'conflict', description: 'a pause or resume while another is under way' },
  pause_mode_unavailable: { category: 'conflict', description: 'the pause mode asked for cannot be done by this runtime on this host (the message says why)' },
  session_id_taken: { category: 'conflict', description: 'through a gateway: three new session ids in a row were taken in the directory; retry' },
  run_in_progress: { category: 'conflict', description: 'the session is driven by another run' },
  volume_exists: { category: 'conflict', description: 'a volume of that name exists already' },
  snapshot_exists: { category: 'conflict', description: 'a snapshot of that name exists already (of the same tenant)' },
  snapshot_in_use: { category: 'conflict', description: 'a delete of a snapshot a session is being started from right now' },
  snapshot_unsupported: {
    category: 'conflict',
    description:
      "a snapshot (or fork) this runtime cannot take here: containers need CRIU 4.1+, a session with volumes, another runtime's snapshot (the message says why)",
  },
  snapshot_quota_exceeded: { category: 'conflict', description: "a snapshot past the tenant's quota (the message names it: SBX_SNAPSHOT_QUOTA_COUNT or _MIB)" },
  volume_in_use: { category: 'conflict', description: 'a volume another session writes (or reads, for a writer), or a delete of one mounted' },
  volumes_unavailable: {
    category: 'conflict',
    description: 'volumes asked of a runtime that cannot mount them here, or a VM-written volume of a container (the message says why)',
  },
  volumes_on_different_nodes: {
    category: 'conflict',
    description: "through a gateway: a create's volumes live on different nodes (a volume stays on the node where it was made); the message names them",
  },
  browser_unavailable: { category: 'conflict', description: 'POST .../browser on a template without Chromium' },

  view_expired: { category: 'gone', description: 'a live-view token past its ttlSeconds' },
  view_revoked: { category: 'gone', description: 'a revoked live-view token' },
  view_session_ended: { category: 'gone', description: "the live view's session has ended" },
  session_gone: { category: 'gone', description: "the session's sandbox vanished: the session is failed" },
  session_lost: { category: 'gone', description: "through a gateway: the session's node stopped heartbeating" },

  body_too_large: { category: 'too_large', description: 'a JSON body over its cap' },
  clipboard_too_large: { category: 'too_large', description: "the sandbox's clipboard holds more than may be read" },
  snapshot_too_large: { category: 'too_large', description: 'a snapshot whose bytes take the tenant past SBX_SNAPSHOT_QUOTA_MIB: not kept' },
  volume_quota_exceeded: { category: 'too_large', description: "a volume over the tenant's quota (the message names it: SBX_VOLUME_QUOTA_MIB or _COUNT)" },
  file_too_large: { category: 'too_large', description: 'a file over SBX_MAX_FILE_BYTES' },

  unsupported_media_type: { category: 'unsupported_media_type', description: 'a body that is not JSON where JSON is expected' },
  range_not_satisfiable: { category: 'out_of_range', description: "a Range outside the recording's bytes" },
  e2b_unsupported: { category: 'invalid', description: 'an E2B SDK feature this surface does not offer (docs/e2b.md)' },
  desktop_action_failed: { category: 'action_failed', description: 'open or launch ran and failed in the guest' },

  tenant_session_limit: { category: 'limit', description: 'the tenant has as many sessions as it may' },
  tenant_concurrency_limit: { category: 'limit', description: 'the tenant has as many requests in flight as it may' },
  tenant_rate_limit: { category: 'limit', description: "the tenant's request rate is over its bucket" },
  tenant_stream_limit: { category: 'limit', description: 'the tenant has as many event streams open as it may' },
  session_viewer_limit: { category: 'limit', description: 'the session has as many live-view browsers as it may' },
  tenant_viewer_limit: { category: 'limit', description: "the tenant's sessions have as many live-view browsers as they may" },
  session_process_limit: { category: 'limit', description: 'the session runs as many processes as it may' },
  process_reader_limit: { category: 'limit', description: 'the process has as many output readers as it may' },
  port_channel_limit: { category: 'limit', description: 'the session has as many requests and WebSockets open through its ports as it may' },
  tenant_run_limit: { category: 'limit', description: 'the tenant runs as many runs as it may' },
  tenant_run_budget: { category: 'limit', description: "a run asking for more than is left of the tenant's day" },

  internal: { category: 'internal', description: 'a bug: the log has the detail under the request id' },

  guest_protocol_error: { category: 'guest', description: 'the guest broke a protocol; that channel is closed' },
  process_start_failed: { category: 'guest', description: 'the guest could not start the process' },
  desktop_error: { category: 'guest', description: 'a display command failed in the guest' },
  guest_error: { category: 'guest', description: 'the sandbox could not be reached to run a companion tool' },
  file_transfer_failed: { category: 'guest', description: "the guest's SFTP server failed" },
  port_not_listening: { category: 'guest', description: 'a request to a guest port nothing listens on' },
  guest_port_error: { category: 'guest', description: "the guest's server on a port closed without an HTTP answer, or sent too large a head" },
  browser_start_failed: { category: 'guest', description: 'Chromium did not answer on its DevTools port as it should' },
  node_failed: { category: 'upstream', description: 'through a gateway: the node broke off after the request was sent' },

  unavailable: { category: 'unavailable', description: 'the sandbox could not be made or reached; nothing was left behind' },
  anthropic_key_missing: { category: 'unavailable', description: 'a run on a server without an Anthropic API key' },
  image_damaged: { category: 'unavailable', description: "the template's guest image failed its integrity check" },
  host_session_limit: { category: 'unavailable', description: 'the host runs as many sessions as it may' },
  host_memory_low: { category: 'unavailable', description: 'the host has too little memory left for a session' },
  host_disk_low: { category: 'unavailable', description: 'the host has too little disk left for a session' },
  network_policy_unavailable: { category: 'unavailable', description: 'the guest network policy is not in force' },
  node_unreachable: { category: 'unavailable', description: "through a gateway: the session's node could not be reached" },
  volume_unavailable: {
    category: 'unavailable',
    description: "through a gateway: the volume's node is not heartbeating; its data is on that node's disk and comes back with it",
  },
  cluster_state_unavailable: { category: 'unavailable', description: 'a gateway could not reach its PostgreSQL in time' },
} as const satisfies Record<string, ErrorCodeEntry>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** The codes of one category, e.g. `CodeOf<'limit'>` for the tenant's quotas. */
export type CodeOf<C extends ErrorCategory> = { [K in ErrorCode]: (typeof ERROR_CODES)[K]['category'] extends C ? K : never }[ErrorCode];
