#if canImport(Glibc)
import Glibc
#endif
import CampaignIO
import CampaignJSON
import PlanStream
import SendJournal
import ByteStreams

/// When `campaign plan … | campaign send` is killed as a whole, the plan the
/// journal spooled ends where the kill cut it. Planning again gives the same
/// records (the same job and audience give the same bytes, in the same order);
/// only the header's times differ. ``respool(from:journal:state:)`` reads such
/// a new plan, checks it against the spool, and puts it in the spool's place,
/// so the resume sends exactly what the interrupted send would have.
public enum Respool {
    /// Reads a whole new plan from `source` into the journal's spool, after
    /// checking that the send spooled its plan, that the new header differs only in `created` and `expiry`, and that
    /// every record the spool holds is the same in the new plan. Updates
    /// `state` to the new header. A spool that is complete is kept as it is
    /// (so `--replan` is always safe to give). Returns the number of records checked.
    @discardableResult
    public static func respool(from source: ByteSource, journal: Journal, state: inout JournalState) throws -> Int {
        func refuse(_ reason: JournalError.Reason) -> JournalError { JournalError(path: journal.directory, reason: reason) }
        guard state.settings.planPath == nil else {
            throw refuse(.replanOfAPlanFile(plan: state.settings.planPath!))
        }
        func openSpool() throws -> PlanReader {
            try PlanReader(source: journal.openSpool(), path: journal.spoolPath)
        }
        // A spool that is complete needs nothing: standard input is left unread
        // (the planner upstream then ends on a broken pipe, which is harmless).
        let first = try openSpool()
        while (try? first.next()) ?? nil != nil {}
        if first.isComplete {
            // A kill between putting a new plan in the spool's place and
            // journaling its header leaves the journal with the old plan's
            // times: the complete spool is the plan to go on with.
            if let journaled = try? PlanHeader(json: state.planHeader), sameBeyondTimes(journaled, first.header) {
                state.planHeader = first.header.json
            }
            return 0
        }

        let old = try openSpool()
        let replacement = journal.spoolPath + ".replan"
        let new = try PlanReader(source: SpoolingSource(source: source, spoolPath: replacement), path: "standard input")
        var keep = false
        defer { if !keep { unlink(replacement) } }

        guard sameBeyondTimes(old.header, new.header) else {
            throw refuse(.replanOtherHeader)
        }
        var checked = 0
        while true {
            // The spool ends where the kill cut it: possibly inside a record.
            let expected: PlanRecord?
            do { expected = try old.next() } catch { break }
            guard let expected else { break }
            guard let got = try new.next() else {
                throw refuse(.replanShorter(records: checked))
            }
            guard sameBeyondTimes(got, expected) else {
                throw refuse(.replanRecordDiffers(seq: expected.seq))
            }
            checked += 1
        }
        while try new.next() != nil {}
        guard new.isComplete else {
            throw refuse(.replanWithoutTrailer)
        }
        try journal.replaceSpool(with: replacement)
        keep = true
        state.planHeader = new.header.json
        return checked
    }

    /// Whether two plan headers differ at most in their times (`created`,
    /// `expiry`, and the date a `deliverAt` without one was given) and their
    /// planning run's id: the same job planned again, later.
    package static func sameBeyondTimes(_ a: PlanHeader, _ b: PlanHeader) -> Bool {
        func timeless(_ h: PlanHeader) -> PlanHeader {
            var h = h
            (h.created, h.expiry, h.run) = (0, 0, nil)
            if case .deliverAt(var d)? = h.schedule {
                d.date = nil
                h.schedule = .deliverAt(d)
            }
            return h
        }
        return timeless(a) == timeless(b)
    }

    /// Whether two records are the same notification: a scheduled record's
    /// moment (and, for quiet hours, the plan time it may hold) depends on
    /// when it was planned; campaign, token and payload do not.
    package static func sameBeyondTimes(_ a: PlanRecord, _ b: PlanRecord) -> Bool {
        var (a, b) = (a, b)
        (a.at, b.at) = (nil, nil)
        return a == b
    }
}
