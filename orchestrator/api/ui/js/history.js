/* Undo / redo by snapshots of the graph JSON (200 deep). */
export function createHistory(snapshot, restore, limit = 200) {
  let past = [];
  let future = [];
  return {
    reset() {
      past = [snapshot()];
      future = [];
    },
    /* Record the current graph if it changed; true when it did. */
    commit() {
      const s = snapshot();
      if (past.at(-1) === s) return false;
      past.push(s);
      if (past.length > limit) past.shift();
      future = [];
      return true;
    },
    undo() {
      if (past.length < 2) return false;
      future.push(past.pop());
      restore(past.at(-1));
      return true;
    },
    redo() {
      if (!future.length) return false;
      const s = future.pop();
      past.push(s);
      restore(s);
      return true;
    },
    /* Forget the last commit and go back to the one before (a refused change). */
    drop() {
      if (past.length < 2) return;
      past.pop();
      restore(past.at(-1));
    },
    get changed() {
      return past.length > 1;
    },
  };
}
