// Where a JSON text first breaks the grammar: V8's JSON.parse messages do not always carry a position.

const LITERALS = ['true', 'false', 'null'] as const;
const ESCAPES = new Set(['"', '\\', '/', 'b', 'f', 'n', 'r', 't']);

/**
 * The UTF-16 offset of the first character that makes `text` invalid JSON (RFC 8259), `text.length` when it
 * ends too early, or undefined when it is valid. Iterative: nesting depth costs no call stack.
 */
export function jsonSyntaxErrorOffset(text: string): number | undefined {
  const stack: string[] = [];
  let i = 0;
  const skipWhitespace = () => {
    while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r'))
      i += 1;
  };
  /** Scans the string starting at i (a '"'); returns an error offset or undefined with i past it. */
  const scanString = (): number | undefined => {
    i += 1;
    while (i < text.length) {
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        i += 1;
        return undefined;
      }
      if (c < 0x20) return i;
      if (c === 0x5c) {
        const escaped = text[i + 1];
        if (escaped === undefined) return text.length;
        if (escaped === 'u') {
          for (let digit = i + 2; digit < i + 6; digit += 1) {
            if (!/^[0-9a-fA-F]$/.test(text[digit] ?? '')) return Math.min(digit, text.length);
          }
          i += 6;
          continue;
        }
        if (!ESCAPES.has(escaped)) return i + 1;
        i += 2;
        continue;
      }
      i += 1;
    }
    return text.length;
  };
  /** Scans the number starting at i; a missing digit is placed where it should have been. */
  const scanNumber = (): number | undefined => {
    if (text[i] === '-') i += 1;
    if (!isDigit(text[i])) return i;
    if (text[i] === '0') i += 1;
    else while (isDigit(text[i])) i += 1;
    if (text[i] === '.') {
      i += 1;
      if (!isDigit(text[i])) return i;
      while (isDigit(text[i])) i += 1;
    }
    if (text[i] === 'e' || text[i] === 'E') {
      i += 1;
      if (text[i] === '+' || text[i] === '-') i += 1;
      if (!isDigit(text[i])) return i;
      while (isDigit(text[i])) i += 1;
    }
    return undefined;
  };
  /** After '{' or ',' in an object: a key string, then ':'. */
  const scanKey = (): number | undefined => {
    skipWhitespace();
    if (text[i] !== '"') return i;
    const error = scanString();
    if (error !== undefined) return error;
    skipWhitespace();
    if (text[i] !== ':') return i;
    i += 1;
    return undefined;
  };

  let expectValue = true;
  for (;;) {
    skipWhitespace();
    if (expectValue) {
      const c = text[i];
      if (c === undefined) return i;
      if (c === '{') {
        i += 1;
        skipWhitespace();
        if (text[i] === '}') {
          i += 1;
          expectValue = false;
          continue;
        }
        stack.push('{');
        const error = scanKey();
        if (error !== undefined) return error;
        continue;
      }
      if (c === '[') {
        i += 1;
        skipWhitespace();
        if (text[i] === ']') {
          i += 1;
          expectValue = false;
          continue;
        }
        stack.push('[');
        continue;
      }
      if (c === '"') {
        const error = scanString();
        if (error !== undefined) return error;
      } else if (c === '-' || isDigit(c)) {
        const error = scanNumber();
        if (error !== undefined) return error;
      } else {
        const literal = LITERALS.find((word) => text.startsWith(word, i));
        if (literal === undefined) {
          // A truncated literal ("tru") is a text that ends too early.
          const partial = LITERALS.some((word) => word.startsWith(text.slice(i)));
          return partial ? text.length : i;
        }
        i += literal.length;
      }
      expectValue = false;
      continue;
    }
    const open = stack.at(-1);
    if (open === undefined) return i < text.length ? i : undefined;
    const c = text[i];
    if (c === ',') {
      i += 1;
      if (open === '{') {
        const error = scanKey();
        if (error !== undefined) return error;
      }
      expectValue = true;
      continue;
    }
    if ((open === '{' && c === '}') || (open === '[' && c === ']')) {
      stack.pop();
      i += 1;
      continue;
    }
    return i;
  }
}

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= '0' && c <= '9';
}

/** 1-based line and column (in characters, not UTF-16 units) of a UTF-16 offset. */
export function lineAndColumn(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, offset);
  const lineStart = before.lastIndexOf('\n') + 1;
  let line = 1;
  for (let at = before.indexOf('\n'); at !== -1; at = before.indexOf('\n', at + 1)) line += 1;
  return { line, column: [...before.slice(lineStart)].length + 1 };
}

/**
 * The path of the first key that appears twice in one object of a valid JSON text (`["server", "baseUrl"]`),
 * or undefined when every object's keys are distinct. JSON.parse silently keeps the last value of a repeated
 * key: the config an operator reads top-down would not be the one the agent runs.
 */
export function firstDuplicateKey(text: string): (string | number)[] | undefined {
  interface Frame {
    keys: Set<string> | undefined;
    at: string | number | undefined;
  }
  const stack: Frame[] = [];
  for (let i = 0; i < text.length; i += 1) {
    const c = text[i];
    if (c === '{') stack.push({ keys: new Set(), at: undefined });
    else if (c === '[') stack.push({ keys: undefined, at: 0 });
    else if (c === '}' || c === ']') stack.pop();
    else if (c === ',') {
      const top = stack.at(-1);
      if (top !== undefined && typeof top.at === 'number') top.at += 1;
    } else if (c === '"') {
      let end = i + 1;
      while (text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      const top = stack.at(-1);
      let next = end + 1;
      while (text[next] === ' ' || text[next] === '\t' || text[next] === '\n' || text[next] === '\r')
        next += 1;
      if (top?.keys !== undefined && text[next] === ':') {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        if (top.keys.has(key)) return [...stack.slice(0, -1).map((frame) => frame.at!), key];
        top.keys.add(key);
        top.at = key;
      }
      i = end;
    }
  }
  return undefined;
}
