import AssetCatalog
import Foundation
import Hummingbird

/// The jobs page: what runs and what waits, with progress.
extension Pages {
    /// How many jobs of each state the page lists (it counts them all).
    static let jobsShown = 200

    /// `/jobs`: the running jobs, then the queued ones, the first ``jobsShown`` of each in ID
    /// order with the count of all.
    func jobs(_ fields: FormFields) async throws -> Response {
        let catalog = self.catalog
        let shown = Self.jobsShown
        let (running, queued) = try await blocking {
            let every = [1...Int64.max]
            return (
                try catalog.jobs.list(ids: every, state: .running, limit: shown),
                try catalog.jobs.list(ids: every, state: .queued, limit: shown)
            )
        }
        func section(_ title: String, _ id: String, _ found: (first: [JobRecord], count: Int)) -> HTML {
            let more: HTML =
                found.count > found.first.count
                ? "<p class=\"muted\">The first \(found.first.count) of \(found.count).</p>" : ""
            return """
                <section class="block" id="\(id)">
                <h2>\(title) <span class="count">\(found.count)</span></h2>
                \(found.first.isEmpty ? "<p class=\"empty\">None.</p>" : jobTable(found.first, showsAsset: true))
                \(more)
                </section>
                """
        }
        let body: HTML = """
            <h1>Jobs</h1>
            <p class="summary">Jobs run in the processes that open the catalog with workers (<code>assetcat add</code>, \
            <code>assetcat jobs run</code>, a pipeline). <a href="/jobs">Refresh</a></p>
            \(section("Running", "running", running))
            \(section("Queued", "queued", queued))
            """
        return page("Jobs", body)
    }

    /// A table of jobs: ID, kind, asset (a link), state, progress, attempts, last change, error.
    func jobTable(_ jobs: [JobRecord], showsAsset: Bool) -> HTML {
        let rows = jobs.map { job -> HTML in
            let percent = Int((min(max(job.progress, 0), 1) * 100).rounded())
            let asset: HTML =
                showsAsset ? "<td><a href=\"\(Self.assetPath(job.asset))\">\(job.asset.rawValue)</a></td>" : ""
            return """
                <tr><td class="num">\(job.id)</td><td>\(job.kind)</td>\(asset)<td><span class="state state-\(job.state.rawValue)">\
                \(job.state.rawValue)</span></td>\
                <td><progress max="100" value="\(percent)">\(percent)%</progress> \(percent)%</td>\
                <td class="num">\(job.attempts)</td><td class="date">\(Self.date(job.updated))</td>\
                <td class="error-text">\(job.error ?? "")</td></tr>
                """
        }
        let assetHeader: HTML = showsAsset ? "<th>Asset</th>" : ""
        return """
            <table class="jobs">
            <thead><tr><th class="num">ID</th><th>Kind</th>\(assetHeader)<th>State</th>\
            <th>Progress</th><th class="num">Attempts</th><th>Updated</th><th>Error</th></tr></thead>
            <tbody>\(rows)</tbody>
            </table>
            """
    }
}
