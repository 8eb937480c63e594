/// The server's static files: compiled in, served by name from this table only (no folder
/// is served, so no URL reaches the file system).
enum StaticFiles {
    /// A file: its media type and text.
    struct File: Sendable {
        var type: String
        var text: String
    }

    /// The files, by name (`/static/NAME`).
    static let named: [String: File] = [
        "style.css": File(type: "text/css; charset=utf-8", text: style)
    ]

    /// Changes with the style sheet, so that a browser does not keep an old one (`?v=`).
    static let version = String(UInt32(truncatingIfNeeded: style.utf8.reduce(5381) { ($0 &* 33) ^ Int($1) }), radix: 36)

    /// The pages' only style sheet.
    static let style = """
        :root {
          --ink: #1d2430; --muted: #667085; --line: #e3e7ee; --soft: #f6f8fb; --accent: #2456c7;
          --accent-soft: #e8eefc; --danger: #b42318; --danger-soft: #fdecea; --ok: #16794c;
          font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
          font-size: 15px; line-height: 1.45; color: var(--ink); background: #fff;
        }
        * { box-sizing: border-box; }
        body { margin: 0; }
        a { color: var(--accent); text-decoration: none; }
        a:hover { text-decoration: underline; }
        code, pre, .digest { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 13px; }
        .top {
          display: flex; align-items: center; gap: 24px; padding: 10px 24px;
          border-bottom: 1px solid var(--line); background: var(--soft);
        }
        .brand { font-weight: 700; font-size: 17px; color: var(--ink); letter-spacing: .2px; }
        .top nav { display: flex; gap: 16px; }
        .top nav a { color: var(--ink); }
        .search { display: flex; gap: 8px; margin-left: auto; flex: 0 1 520px; }
        .search input {
          flex: 1; padding: 7px 10px; border: 1px solid #cfd6e1; border-radius: 6px; font: inherit; background: #fff;
        }
        button, .button {
          display: inline-block; padding: 6px 14px; border: 1px solid #cfd6e1; border-radius: 6px; background: #fff;
          color: var(--ink); font: inherit; cursor: pointer; text-decoration: none; line-height: 1.4;
        }
        button:hover, .button:hover { background: var(--soft); text-decoration: none; }
        button[type=submit].primary, .search button { background: var(--accent); border-color: var(--accent); color: #fff; }
        .danger { color: var(--danger); border-color: #f1b8b3; }
        button.danger { background: var(--danger); border-color: var(--danger); color: #fff; }
        main { padding: 20px 24px 48px; max-width: 1280px; }
        h1 { font-size: 22px; margin: 0 0 4px; overflow-wrap: anywhere; }
        h2 { font-size: 15px; margin: 0 0 8px; text-transform: uppercase; letter-spacing: .5px; color: var(--muted); }
        .summary, .muted { color: var(--muted); }
        .summary { margin: 0 0 14px; }
        .layout { display: grid; grid-template-columns: 200px minmax(0, 1fr); gap: 28px; }
        .facets h2 { margin-top: 6px; }
        .facet { list-style: none; padding: 0; margin: 0 0 20px; }
        .facet li { display: flex; justify-content: space-between; padding: 3px 0; overflow-wrap: anywhere; }
        .count { color: var(--muted); font-size: 13px; font-weight: normal; }
        table { border-collapse: collapse; width: 100%; }
        th, td { text-align: left; padding: 7px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
        thead th { font-size: 13px; color: var(--muted); font-weight: 600; background: var(--soft); }
        tbody tr:hover { background: #fafbfd; }
        td.name { overflow-wrap: anywhere; }
        .thumb {
          display: inline-block; width: 48px; height: 48px; margin-right: 10px; vertical-align: middle;
          object-fit: contain; border-radius: 4px; background: var(--soft); border: 1px solid var(--line);
        }
        .num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
        .date { white-space: nowrap; color: var(--muted); font-variant-numeric: tabular-nums; }
        .select { width: 28px; }
        .kind { font-size: 12px; padding: 1px 7px; border-radius: 10px; background: var(--soft); border: 1px solid var(--line); }
        .tag {
          display: inline-flex; align-items: center; gap: 4px; font-size: 12px; padding: 1px 8px; margin: 0 4px 2px 0;
          border-radius: 10px; background: var(--accent-soft); color: var(--accent);
        }
        .actions { display: flex; gap: 10px; align-items: center; margin: 14px 0; }
        .crumbs { color: var(--muted); margin-bottom: 8px; overflow-wrap: anywhere; }
        .asset {
          display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1.2fr); gap: 28px; margin-top: 14px;
          align-items: start;
        }
        .preview { border: 1px solid var(--line); border-radius: 8px; background: var(--soft); padding: 12px; }
        .preview p { margin: 0; }
        .preview img { display: block; width: 100%; height: 320px; object-fit: contain; }
        .text-preview {
          margin: 0; width: 100%; white-space: pre-wrap; overflow-wrap: anywhere; max-height: 480px; overflow: auto;
        }
        .fields { display: grid; grid-template-columns: 110px minmax(0, 1fr); gap: 6px 14px; margin: 0; }
        .fields dt { color: var(--muted); }
        .fields dd { margin: 0; overflow-wrap: anywhere; }
        .block { margin-top: 28px; }
        .tag-list { list-style: none; padding: 0; margin: 0 0 10px; display: flex; flex-wrap: wrap; gap: 6px; }
        .tag-list .tag { font-size: 13px; padding: 2px 4px 2px 10px; }
        .tag-list .none { color: var(--muted); }
        form.inline { display: inline; margin: 0; }
        button.remove {
          border: none; background: none; color: var(--accent); padding: 0 5px; font-size: 15px; line-height: 1;
        }
        button.remove:hover { color: var(--danger); background: none; }
        .add-tag { display: flex; gap: 8px; max-width: 360px; }
        .add-tag input { flex: 1; padding: 6px 10px; border: 1px solid #cfd6e1; border-radius: 6px; font: inherit; }
        table.plain th { width: 200px; background: none; color: var(--muted); font-weight: normal; }
        .error { color: var(--danger); background: var(--danger-soft); padding: 10px 14px; border-radius: 6px; }
        .notice { color: var(--ok); background: #e9f7ef; padding: 10px 14px; border-radius: 6px; }
        .empty { color: var(--muted); padding: 16px 0; }
        .block .empty { padding: 0; margin: 0; }
        .confirm { max-width: 640px; }
        .confirm form { display: flex; gap: 10px; margin-top: 16px; }
        progress { width: 120px; vertical-align: middle; }
        .state { font-size: 12px; padding: 1px 7px; border-radius: 10px; background: var(--soft); }
        .state-running { background: var(--accent-soft); color: var(--accent); }
        .error-text { color: var(--danger); overflow-wrap: anywhere; }
        .visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
        @media (max-width: 800px) {
          .layout, .asset { grid-template-columns: 1fr; }
          .top { flex-wrap: wrap; }
        }

        """
}
