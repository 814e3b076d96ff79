import { SandboxError } from './errors.js';
import type { ScreenshotFormatOptions } from './screenshot-format.js';
import type { ActionResult, ComputerToolInput } from './types.js';
import { VendorToolMethods } from './vendor-tools.js';

/** One method per computer-use action, as methods of a Sandbox; coordinates are in the model's space. */
export abstract class ComputerActionMethods extends VendorToolMethods {
  abstract action(input: ComputerToolInput, options?: { screenshot?: boolean } & ScreenshotFormatOptions): Promise<ActionResult>;

  mouseMove(x: number, y: number): Promise<ActionResult> {
    return this.action({ action: 'mouse_move', coordinate: [x, y] });
  }

  leftClick(x?: number, y?: number, modifier?: string): Promise<ActionResult> {
    return this.click('left_click', x, y, modifier);
  }

  rightClick(x?: number, y?: number, modifier?: string): Promise<ActionResult> {
    return this.click('right_click', x, y, modifier);
  }

  middleClick(x?: number, y?: number, modifier?: string): Promise<ActionResult> {
    return this.click('middle_click', x, y, modifier);
  }

  doubleClick(x?: number, y?: number, modifier?: string): Promise<ActionResult> {
    return this.click('double_click', x, y, modifier);
  }

  tripleClick(x?: number, y?: number, modifier?: string): Promise<ActionResult> {
    return this.click('triple_click', x, y, modifier);
  }

  leftClickDrag(to: [number, number], from?: [number, number]): Promise<ActionResult> {
    return this.action(from ? { action: 'left_click_drag', start_coordinate: from, coordinate: to } : { action: 'left_click_drag', coordinate: to });
  }

  leftMouseDown(): Promise<ActionResult> {
    return this.action({ action: 'left_mouse_down' });
  }

  leftMouseUp(): Promise<ActionResult> {
    return this.action({ action: 'left_mouse_up' });
  }

  scroll(direction: 'up' | 'down' | 'left' | 'right', amount: number, at?: [number, number], modifier?: string): Promise<ActionResult> {
    const input: ComputerToolInput = { action: 'scroll', scroll_direction: direction, scroll_amount: amount };
    if (at) input.coordinate = at;
    if (modifier) input.text = modifier;
    return this.action(input);
  }

  type(text: string): Promise<ActionResult> {
    return this.action({ action: 'type', text });
  }

  key(combo: string): Promise<ActionResult> {
    return this.action({ action: 'key', text: combo });
  }

  holdKey(key: string, seconds: number): Promise<ActionResult> {
    return this.action({ action: 'hold_key', text: key, duration: seconds });
  }

  wait(seconds: number): Promise<ActionResult> {
    return this.action({ action: 'wait', duration: seconds });
  }

  async zoom(region: [number, number, number, number]): Promise<Buffer> {
    const result = await this.action({ action: 'zoom', region });
    if (!result.image) throw new SandboxError('zoom returned no image', 502, 'bad_response');
    return Buffer.from(result.image.data, 'base64');
  }

  async cursorPosition(): Promise<{ x: number; y: number }> {
    const result = await this.action({ action: 'cursor_position' });
    if (!result.cursor) throw new SandboxError('cursor_position returned no cursor', 502, 'bad_response');
    return result.cursor;
  }

  private click(action: string, x?: number, y?: number, modifier?: string): Promise<ActionResult> {
    const input: ComputerToolInput = { action };
    if (x !== undefined && y !== undefined) input.coordinate = [x, y];
    if (modifier) input.key = modifier;
    return this.action(input);
  }
}
