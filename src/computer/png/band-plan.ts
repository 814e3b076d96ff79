/**
 * Which rows of a new frame to deflate again (banded-png.ts). The frame is cut into bands of
 * full-width rows; bands deflated together form a piece, whose compressed bytes are kept
 * whole. A kept piece is reused when none of its bands changed; otherwise all its bands are
 * deflated again, in new pieces.
 *
 * Bands are grouped into pieces of up to `maxBands`, because each deflate call costs ~25-50 us
 * on its own (zlib state, the trip to the libuv pool): a frame where every row changed (text
 * scrolling) then costs about one deflate of the whole frame, not one per band. A new piece
 * holds bands that all changed or all did not (the latter only re-deflated because their old
 * piece had a changed band), so that a small change that repeats (a clock, a cursor) soon
 * sits in pieces of its own.
 */

/** Bands `first` to `end - 1`. */
export interface BandSpan {
  first: number;
  end: number;
}

export type PlannedPiece = { span: BandSpan; kept: number } | { span: BandSpan; kept?: undefined };

/**
 * The pieces of the new frame, in order, covering every band: either `kept` (the index of
 * a stored piece, reused as it is) or to deflate. `changed[i]`: band i's pixels differ from
 * the stored frame's. `stored`: the stored pieces (in order, covering every band), or
 * undefined when there is no usable stored frame (everything is deflated).
 */
export function planPieces(changed: readonly boolean[], stored: readonly BandSpan[] | undefined, maxBands: number): PlannedPiece[] {
  const bands = changed.length;
  // For each band, the stored piece that starts there and can be reused.
  const keptAt = new Map<number, number>();
  const redo = new Array<boolean>(bands).fill(stored === undefined);
  stored?.forEach((span, index) => {
    let changedInside = false;
    for (let band = span.first; band < span.end; band++) changedInside ||= changed[band]!;
    if (changedInside) redo.fill(true, span.first, span.end);
    else keptAt.set(span.first, index);
  });
  const plan: PlannedPiece[] = [];
  for (let band = 0; band < bands;) {
    const kept = redo[band] ? undefined : keptAt.get(band);
    if (kept !== undefined) {
      const span = stored![kept]!;
      plan.push({ span, kept });
      band = span.end;
      continue;
    }
    let end = band + 1;
    while (end < bands && end - band < maxBands && redo[end] && changed[end] === changed[band]) end++;
    plan.push({ span: { first: band, end } });
    band = end;
  }
  return plan;
}
