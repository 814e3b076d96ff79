/**
 * Firecracker answered a call with an error status. `call` names the call ("PUT /boot-source",
 * "PUT /drives/rootfs"), so a failed boot says which step broke and what Firecracker said.
 */
export class FirecrackerApiError extends Error {
  constructor(
    readonly call: string,
    readonly statusCode: number,
    /** Firecracker's `fault_message`, or the raw body if it was not the usual JSON. */
    readonly faultMessage: string,
  ) {
    super(`Firecracker ${call} failed (HTTP ${statusCode}): ${faultMessage || '(no fault_message)'}`);
    this.name = 'FirecrackerApiError';
  }
}

/**
 * A call never got an answer: the socket refused or vanished (the process died), or the
 * call's time limit ran out. Kept apart from FirecrackerApiError because the remedy differs:
 * this one usually means the VMM is gone, not that the request was wrong.
 */
export class FirecrackerTransportError extends Error {
  constructor(
    readonly call: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`Firecracker ${call}: ${message}`, options);
    this.name = 'FirecrackerTransportError';
  }
}
