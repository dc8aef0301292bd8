// The dashboard's event list (issue 32 part 4): the `events` of /v1/gateway/ranks, newest first. Each answer holds the
// answering process's whole list (at most 200, oldest first, ids growing by one); the page appends only the ids it has
// not shown. A new `events_source` (a restarted gateway, or another front with --workers) starts the list over.

/** Items shown at most (the gateway keeps 200). */
const MAX_SHOWN = 200;

/** How each kind reads in the list, and its colour class (ok / warn / bad). */
const KINDS = {
  rank_joined: ['joined', 'ok'],
  rank_rejoined: ['rejoined', 'ok'],
  rank_stalled: ['stalled', 'warn'],
  rank_died: ['died', 'bad'],
  group_failed: ['group failed', 'bad'],
  refused: ['429', 'warn'],
  engine_errors: ['engine errors', 'bad'],
};

function item(doc, e) {
  const [label, tone] = KINDS[e.kind] ?? [e.kind, 'warn'];
  const li = doc.createElement('li');
  li.className = `event ${tone}`;
  li.dataset.id = String(e.id);
  li.dataset.kind = e.kind;
  if (e.group !== null) li.dataset.group = e.group;
  if (e.dp_rank !== null) li.dataset.rank = String(e.dp_rank);
  if (e.cause !== null) li.dataset.cause = e.cause;
  const time = doc.createElement('time');
  time.dateTime = new Date(e.timestamp * 1000).toISOString();
  time.textContent = new Date(e.timestamp * 1000).toLocaleTimeString();
  const kind = doc.createElement('span');
  kind.className = 'kind';
  kind.textContent = label;
  const where = doc.createElement('span');
  where.className = 'where';
  where.textContent = e.group ?? 'gateway';
  const message = doc.createElement('span');
  message.className = 'message';
  message.textContent = e.message;
  li.append(time, kind, where, message);
  return li;
}

/** The event list in `list` (an `<ol>`), with `empty` shown while it has no item. */
export class EventList {
  constructor(list, empty) {
    this.list = list;
    this.empty = empty;
    this.source = null;
    this.lastId = 0;
  }

  /** Show the events of `view` (a /v1/gateway/ranks answer) not shown yet, newest at the top. */
  update(view) {
    if (view.events_source !== this.source) {
      this.list.replaceChildren();
      this.source = view.events_source;
      this.lastId = 0;
    }
    for (const e of view.events) {
      if (e.id <= this.lastId) continue;
      this.list.prepend(item(this.list.ownerDocument, e));
      this.lastId = e.id;
    }
    while (this.list.children.length > MAX_SHOWN) this.list.lastElementChild.remove();
    this.empty.hidden = this.list.children.length > 0;
  }
}
