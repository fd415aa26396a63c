// Stryker ignorer (stryker.config.mjs): mutants that change only log lines, which no test reads. Tests assert
// on resulting state (files, state, outbox, what the mock received), never on logs, so a mutant inside
// `logger.warn({ … }, '…')`, in the condition of an `if` that only logs, or removing a block that only logs,
// can only survive.

const LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal']);

/** `logger.warn(…)`, `ctx.logger.error(…)`, `this.#logger.debug(…)` as a whole statement. */
function isLogStatement(path) {
  if (!path.isExpressionStatement()) return false;
  const call = path.node.expression;
  if (call.type !== 'CallExpression' || call.callee.type !== 'MemberExpression') return false;
  const { object, property } = call.callee;
  if (property.type !== 'Identifier' || !LEVELS.has(property.name)) return false;
  const receiver =
    object.type === 'Identifier'
      ? object.name
      : object.type === 'MemberExpression'
        ? object.property.type === 'Identifier'
          ? object.property.name
          : object.property.type === 'PrivateName'
            ? object.property.id.name
            : undefined
        : undefined;
  return receiver === 'logger' || receiver === 'log';
}

/** `if (…) { logger.warn(…); }`: a condition that only chooses whether to log. */
function isLogOnlyIf(path) {
  if (!path.isIfStatement() || path.node.alternate) return false;
  const body = path.get('consequent');
  const statements = body.isBlockStatement() ? body.get('body') : [body];
  return statements.length > 0 && statements.every(isLogStatement);
}

/** `catch { logger.warn(…); }`, `.catch((error) => { logger.warn(…); })`: a block that only logs. */
function isLogOnlyBlock(path) {
  if (!path.isBlockStatement()) return false;
  const statements = path.get('body');
  return statements.length > 0 && statements.every(isLogStatement);
}

export const strykerPlugins = [
  {
    kind: 'Ignore',
    name: 'logging',
    value: {
      shouldIgnore(path) {
        return isLogStatement(path) || isLogOnlyIf(path) || isLogOnlyBlock(path)
          ? 'a log call: tests assert on state, never on log lines'
          : undefined;
      },
    },
  },
];
