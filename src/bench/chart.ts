import sharp from 'sharp';

/** One figure of the issue's table: its value, its goal, and which way is better. */
export interface ChartRow {
  label: string;
  value: number | null;
  goal: number;
  unit: string;
  /** Which way is better: 'lower' (the default) or 'higher' (e.g. most sessions). */
  better?: 'lower' | 'higher';
  /** Shown against another row's goal for comparison, not a goal of its own (drawn grey, never "missed"). */
  reference?: boolean;
}

const WIDTH = 1000;
const ROW = 46;
const LEFT = 330;
const BAR_MAX = 420;

/**
 * The bench's figures against their goals as a bar chart: each bar is value / goal, with the
 * goal line at the same place for every row, so a bar past the line is a goal missed. Drawn
 * as SVG and rendered to PNG with sharp (librsvg).
 */
export async function writeChart(file: string, title: string, rows: ChartRow[]): Promise<void> {
  const height = 70 + rows.length * ROW + 30;
  const goalX = LEFT + BAR_MAX / 2; // the goal sits at half the bar range: up to 2x the goal is drawn
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" font-family="DejaVu Sans, sans-serif">`,
    `<rect width="100%" height="100%" fill="#ffffff"/>`,
    `<text x="20" y="32" font-size="18" font-weight="bold">${escape(title)}</text>`,
    `<line x1="${goalX}" y1="50" x2="${goalX}" y2="${height - 30}" stroke="#333" stroke-dasharray="4 3"/>`,
    `<text x="${goalX}" y="${height - 12}" font-size="12" text-anchor="middle">goal</text>`,
  ];
  rows.forEach((row, i) => {
    const y = 60 + i * ROW;
    parts.push(`<text x="20" y="${y + 20}" font-size="13">${escape(row.label)}</text>`);
    if (row.value === null || !Number.isFinite(row.value)) {
      parts.push(`<text x="${LEFT}" y="${y + 20}" font-size="13" fill="#777">not measured</text>`);
      return;
    }
    // Past the goal line is a goal missed, whichever way is better.
    const ratio = row.better === 'higher' ? (row.value > 0 ? row.goal / row.value : 2) : row.goal > 0 ? row.value / row.goal : row.value > 0 ? 2 : 0;
    const width = Math.max(2, Math.min(BAR_MAX, (ratio * BAR_MAX) / 2));
    const colour = row.reference ? '#9aa5b1' : ratio <= 1 ? '#2e8b57' : '#c0392b';
    parts.push(`<rect x="${LEFT}" y="${y + 6}" width="${width.toFixed(1)}" height="20" fill="${colour}"/>`);
    parts.push(
      `<text x="${LEFT + BAR_MAX + 10}" y="${y + 20}" font-size="12">${escape(`${format(row.value)} ${row.unit} (${row.reference ? "PNG's goal" : 'goal'} ${row.better === 'higher' ? '>=' : '<='} ${format(row.goal)})`)}</text>`,
    );
  });
  parts.push('</svg>');
  await sharp(Buffer.from(parts.join('\n')))
    .png()
    .toFile(file);
}

function format(value: number): string {
  return Math.abs(value) >= 100 ? value.toFixed(0) : Math.abs(value) >= 1 ? value.toFixed(2) : value.toFixed(3);
}

function escape(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
