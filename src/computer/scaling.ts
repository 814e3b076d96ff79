import { InvalidRequestError } from '../errors.js';

/**
 * The model sees the screen at a size it was trained on, not necessarily the real one.
 * Screens larger than one of these targets with the same aspect ratio are scaled down
 * (shared/computer-use/ACTIONS.md, "Scaling"): screenshots go down to the target, the
 * model's coordinates come back up, reported positions go down again.
 */
export const SCALING_TARGETS = [
  { name: 'XGA', width: 1024, height: 768 },
  { name: 'WXGA', width: 1280, height: 800 },
  { name: 'FWXGA', width: 1366, height: 768 },
] as const;

export type ScalingRequest = 'auto' | 'none' | { width: number; height: number };

export interface Size {
  width: number;
  height: number;
}

export interface Point {
  x: number;
  y: number;
}

/** The model-facing size of a screen, as the reference chooses it. */
export function modelSize(screen: Size, request: ScalingRequest = 'auto'): Size {
  if (request === 'none') return { ...screen };
  if (request !== 'auto') {
    if (request.width > screen.width || request.height > screen.height) {
      throw new InvalidRequestError(
        `scaling ${request.width}x${request.height} is larger than the screen ${screen.width}x${screen.height}; it can only scale down`,
      );
    }
    return { width: request.width, height: request.height };
  }
  const ratio = screen.width / screen.height;
  for (const target of SCALING_TARGETS) {
    // The first target of (nearly) the same aspect ratio decides; only a larger screen scales.
    if (Math.abs(target.width / target.height - ratio) < 0.02) {
      return target.width < screen.width ? { width: target.width, height: target.height } : { ...screen };
    }
  }
  return { ...screen };
}

export class Scaler {
  constructor(
    readonly screen: Size,
    readonly model: Size,
  ) {}

  get isIdentity(): boolean {
    return this.screen.width === this.model.width && this.screen.height === this.model.height;
  }

  /** A model coordinate (already bounds-checked in model space) on the real screen. */
  toScreen(p: Point): Point {
    return {
      x: Math.min(this.screen.width - 1, Math.round((p.x * this.screen.width) / this.model.width)),
      y: Math.min(this.screen.height - 1, Math.round((p.y * this.screen.height) / this.model.height)),
    };
  }

  /** A real screen position as the model sees it. */
  toModel(p: Point): Point {
    return {
      x: Math.min(this.model.width - 1, Math.round((p.x * this.model.width) / this.screen.width)),
      y: Math.min(this.model.height - 1, Math.round((p.y * this.model.height) / this.screen.height)),
    };
  }
}
