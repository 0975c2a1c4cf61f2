// Reading README.md for readme.test.mjs: its fenced code blocks with the
// marker before each, the commands of a shell block with the output shown
// under them, and the notation of that output (… stands for what varies).

const MARKER = /^<!--\s*readme-test:\s*(run|skip)\b:?\s*(.*?)\s*-->\s*$/;

/**
 * Every fenced block: { line (1-based, of the opening fence), lang, text,
 * marker: {kind: 'run', name} | {kind: 'skip', reason} | null }. The marker
 * is an HTML comment on the line before the fence (blank lines between are
 * allowed): `<!-- readme-test: run [NAME] -->` or `<!-- readme-test: skip: REASON -->`.
 */
export function fencedBlocks(markdown) {
  const lines = markdown.split('\n');
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^( {0,3})(`{3,}|~{3,})\s*([^\s`]*)/.exec(lines[i]);
    if (!open) continue;
    const close = new RegExp(`^ {0,3}${open[2][0]}{${open[2].length},}\\s*$`);
    let j = i + 1;
    while (j < lines.length && !close.test(lines[j])) j++;
    const body = lines.slice(i + 1, j).map((l) => l.replace(new RegExp(`^ {0,${open[1].length}}`), ''));
    blocks.push({ line: i + 1, lang: open[3].toLowerCase(), text: `${body.join('\n')}\n`, marker: markerBefore(lines, i) });
    i = j;
  }
  return blocks;
}

function markerBefore(lines, fence) {
  let k = fence - 1;
  while (k >= 0 && lines[k].trim() === '') k--;
  const m = k >= 0 ? MARKER.exec(lines[k].trim()) : null;
  if (!m) return null;
  return m[1] === 'run' ? { kind: 'run', name: m[2] || null } : { kind: 'skip', reason: m[2] };
}

/**
 * The commands of a shell block, each { text, expect, inline }: `expect` is
 * the output shown in the comment lines right under it (starting with `# {`
 * or `# [`, continued by `#` lines indented further), `inline` a comment on
 * its own line. A command runs on over quoted line breaks, a trailing
 * backslash and a here-document.
 */
export function shellCommands(text) {
  const cmds = [];
  let cur = null;
  let quote = null;
  let heredoc = null;
  let last = null; // the command just before, while only its output comment follows
  let expecting = false;
  for (const line of text.split('\n')) {
    if (heredoc) {
      cur.text += `\n${line}`;
      if (line.trim() === heredoc) { heredoc = null; finish(); }
      continue;
    }
    if (cur) {
      cur.text += `\n${line}`;
    } else {
      const t = line.trim();
      if (t === '') { last = null; continue; }
      if (t.startsWith('#')) {
        const c = t.replace(/^#\s?/, '');
        if (expecting && /^\s/.test(c)) last.expect += `\n${c}`;
        else if (last && !last.expect && /^[[{]/.test(c)) { last.expect = c; expecting = true; }
        else { last = null; expecting = false; }
        continue;
      }
      cur = { text: line, expect: null, inline: null };
    }
    scanLine(line);
    if (!quote && !heredoc && !line.endsWith('\\')) finish();
  }
  if (cur) finish();
  return cmds;

  function finish() {
    cmds.push(cur);
    last = cur;
    expecting = false;
    cur = null;
  }

  // Quotes that stay open, a comment after the command, a here-document's word.
  function scanLine(line) {
    for (let k = 0; k < line.length; k++) {
      const ch = line[k];
      if (quote === "'") { if (ch === "'") quote = null; continue; }
      if (quote === '"') { if (ch === '\\') k++; else if (ch === '"') quote = null; continue; }
      if (ch === '\\') { k++; continue; }
      if (ch === "'" || ch === '"') { quote = ch; continue; }
      if (ch === '#' && (k === 0 || /\s/.test(line[k - 1]))) { cur.inline = line.slice(k + 1).trim(); return; }
      const here = ch === '<' ? /^<<-?\s*['"]?(\w+)['"]?/.exec(line.slice(k)) : null;
      if (here) heredoc = here[1];
    }
  }
}

/** A script that prints a separator line before each command, so its output can be told apart. */
export function separatedScript(cmds) {
  return cmds.map((c, i) => `printf '\\n\\036readme-cmd ${i}\\n'\n${c.text}`).join('\n');
}

/** The output of each command of a `separatedScript`, by index. */
export function outputsByCommand(stdout) {
  const parts = stdout.split(/\n\x1ereadme-cmd (\d+)\n/);
  const out = new Map();
  for (let i = 1; i < parts.length; i += 2) out.set(Number(parts[i]), parts[i + 1]);
  return out;
}

/**
 * README's JSON notation as JSON: a bare … is a value that may be anything
 * (null) or the rest of a list or object (dropped); … inside a string stays.
 */
export function looseJson(text) {
  let out = '';
  let inString = false;
  for (let k = 0; k < text.length; k++) {
    const ch = text[k];
    if (inString) {
      out += ch;
      if (ch === '\\') out += text[++k];
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') inString = true;
    if (ch !== '…') { out += ch; continue; }
    const before = out.trimEnd();
    if (before.endsWith(':')) out = `${before}null`;
    else out = before.endsWith(',') ? before.slice(0, -1) : before;
  }
  return JSON.parse(out);
}

/** Lists that the README shows with an element but may rightly be empty. */
const MAY_BE_EMPTY = new Set(['recentFailures']);

/**
 * Why `actual` does not have the shape `expected` shows, or null: every key
 * shown is there; strings are equal (… inside one matches anything); numbers
 * are numbers; null is anything; each element shown matches some element.
 */
export function shapeMismatch(expected, actual, path = '$') {
  if (expected === null) return null;
  const got = () => `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)?.slice(0, 300)}`;
  if (typeof expected === 'string') {
    return typeof actual === 'string' && glob(expected).test(actual) ? null : got();
  }
  if (typeof expected === 'number') return typeof actual === 'number' ? null : got();
  if (typeof expected === 'boolean') return actual === expected ? null : got();
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return got();
    if (actual.length === 0) {
      return expected.length === 0 || MAY_BE_EMPTY.has(path.split('.').at(-1)) ? null : `${path}: an empty list`;
    }
    for (const [i, e] of expected.entries()) {
      const misses = actual.map((a, j) => shapeMismatch(e, a, `${path}[${j}]`));
      if (!misses.includes(null)) return `${path}[${i}] matches no element: ${misses[Math.min(i, misses.length - 1)]}`;
    }
    return null;
  }
  if (typeof actual !== 'object' || actual === null || Array.isArray(actual)) return got();
  for (const [key, value] of Object.entries(expected)) {
    if (!(key in actual)) return `${path}: no "${key}" in ${JSON.stringify(actual).slice(0, 300)}`;
    const miss = shapeMismatch(value, actual[key], `${path}.${key}`);
    if (miss) return miss;
  }
  return null;
}

/** A whole-string pattern: … matches anything, a run of spaces any run of white space. */
export function glob(pattern, flags = '') {
  const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/\s+/g, '\\s+');
  return new RegExp(`^${pattern.split('…').map(esc).join('[\\s\\S]*?')}$`, flags);
}

/** Whether `texts`, each a `glob` pattern, appear in `output` in that order. Returns the first missing one or null. */
export function missingInOrder(texts, output) {
  let from = 0;
  for (const t of texts) {
    const re = new RegExp(glob(t).source.slice(1, -1), 'g');
    re.lastIndex = from;
    const m = re.exec(output);
    if (!m) return t;
    from = m.index + m[0].length;
  }
  return null;
}
