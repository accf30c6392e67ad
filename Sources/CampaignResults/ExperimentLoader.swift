import Foundation
import APNSWire
import CampaignIO
import CampaignJSON
import CampaignPlan
import CampaignSend
import LocalTime
import PlanStream
import SendJournal
import ByteStreams
import SendEngine

/// A send's experiment as its files tell it: who was in which group (the
/// plan's records and the holdout file), where each notification stands
/// and when it was proven (the journal).
public struct Experiment {
    public var campaign: String
    public var devices: ExperimentDevices
    /// The holdout file read, when the job has a holdout.
    public var holdoutPath: String?
    /// Held-out devices whose moment is not measured: their part never
    /// started (so neither did its variants'), or their moment is still to come.
    public var heldOutUnmeasured = 0
    /// Things the reader should know (a journal left out, a part not started).
    public var notes: [String] = []
}

/// Why results cannot be made: one sentence naming the file, and its sysexits code.
public struct ResultsError: Error, CustomStringConvertible, Equatable {
    public enum Kind: Equatable, Sendable {
        /// A file cannot be read (66).
        case unreadable
        /// A file is read but holds nothing usable: no column, not a plan of this campaign (65).
        case unusable
    }
    public var kind: Kind
    public var description: String

    public init(_ kind: Kind, _ description: String) { (self.kind, self.description) = (kind, description) }

    public var exitCode: Int32 { kind == .unreadable ? 66 : 65 }
}

public enum ExperimentLoader {
    /// One send: its journal, and the holdout file beside its plan
    /// (`PLAN.holdout.ndjson`; a plan piped in: `<campaign>.holdout.ndjson`
    /// here) unless `holdout` names it. `now`: held-out moments still to come are not measured.
    public static func load(journal: String, plan planPath: String? = nil, holdout: String? = nil, now: Int64) throws -> Experiment {
        let (state, header) = try readJournal(journal)
        var experiment = Experiment(campaign: header.campaign, devices: ExperimentDevices(groups: groups(of: header)))
        let outcomes = try JournalOutcomes(directory: journal)
        let plan: PlanReader
        if let planPath {
            plan = try openPlan { try PlanReader(path: planPath) }
            guard plan.header.campaign == header.campaign, plan.header.shards == header.shards else {
                throw ResultsError(.unusable, "\(planPath) is not the plan of the send in \(journal) (campaign \(plan.header.campaign), not \(header.campaign)).")
            }
        } else if let remembered = state.settings.planPath, access(remembered, F_OK) != 0 {
            throw ResultsError(.unreadable, "The send's plan \(remembered) (as its journal remembers it) is gone: give where it is now with --plan FILE.")
        } else {
            plan = try openPlan { try SendSession.planReader(state: state, directory: journal) }
        }
        try addRecords(of: plan, outcomes: outcomes, to: experiment.devices)
        if header.variants.contains(where: \.holdout) {
            // Beside the plan file (PLAN.holdout.ndjson); a plan written to standard output
            // (piped, or redirected into a file) has it as <campaign>.holdout.ndjson where plan ran.
            let planFile = planPath ?? state.settings.planPath
            let candidates = [planFile.map { "\($0).holdout.ndjson" },
                              planFile.map { ($0 as NSString).deletingLastPathComponent }.map { "\($0.isEmpty ? "." : $0)/\(header.campaign).holdout.ndjson" },
                              "\(header.campaign).holdout.ndjson"].compactMap { $0 }
            let path = holdout ?? candidates.first { access($0, R_OK) == 0 } ?? candidates[0]
            experiment.holdoutPath = path
            experiment.heldOutUnmeasured = try addHeldOut(path: path, header: header, now: now, to: experiment.devices) { _ in outcomes.firstStart }
        }
        return experiment
    }

    /// A plan's parts (`plan --parts`): the manifest, the journals of the
    /// parts started (others count as planned, not sent), and the holdout
    /// file in the manifest's directory unless `holdout` names it.
    public static func load(manifest manifestPath: String, journals: [String], holdout: String? = nil, now: Int64) throws -> Experiment {
        let manifest: PlanManifest
        do { manifest = try PlanManifest.load(path: manifestPath) } catch {
            throw ResultsError(access(manifestPath, R_OK) == 0 ? .unusable : .unreadable, "\(error)")
        }
        let directory = (manifestPath as NSString).deletingLastPathComponent.isEmpty ? "." : (manifestPath as NSString).deletingLastPathComponent
        var notes: [String] = []
        var byPart: [Int: (directory: String, state: JournalState)] = [:]
        for journal in journals {
            let (state, header) = try readJournal(journal)
            guard let part = header.part, part.campaignHash == manifest.campaignHash, part.index < manifest.parts.count else {
                notes.append("\(journal) is not a journal of this manifest's parts (planning run \(manifest.campaignHash)); left out")
                continue
            }
            if byPart[part.index] != nil {
                notes.append("part \(part.index) has more than one journal; \(journal) is left out")
                continue
            }
            byPart[part.index] = (journal, state)
        }
        var experiment: Experiment? = nil
        var firstStarts: [Int64?] = Array(repeating: nil, count: manifest.parts.count)
        var header: PlanHeader? = nil
        for entry in manifest.parts {
            let plan: PlanReader
            var outcomes: JournalOutcomes? = nil
            if let journal = byPart[entry.part] {
                outcomes = try JournalOutcomes(directory: journal.directory)
                firstStarts[entry.part] = outcomes?.firstStart
                plan = try openPlan { try SendSession.planReader(state: journal.state, directory: journal.directory) }
            } else {
                notes.append("part \(entry.part) has no journal: its records count as planned, not sent")
                plan = try openPlan { try PlanReader(path: "\(directory)/\(entry.file)") }
            }
            if experiment == nil {
                header = plan.header
                experiment = Experiment(campaign: plan.header.campaign, devices: ExperimentDevices(groups: groups(of: plan.header)))
            }
            try addRecords(of: plan, outcomes: outcomes, to: experiment!.devices)
        }
        guard var experiment, let header else { throw ResultsError(.unusable, "\(manifestPath) lists no parts.") }
        experiment.notes = notes
        if header.variants.contains(where: \.holdout) {
            let path = holdout ?? "\(directory)/holdout.ndjson"
            experiment.holdoutPath = path
            let parts = manifest.parts.count
            // A held-out device belongs to the part its shard would have put it in.
            experiment.heldOutUnmeasured = try addHeldOut(path: path, header: header, now: now, to: experiment.devices) { token in
                firstStarts[Planner.shard(of: token, shards: header.shards) % parts]
            }
        }
        return experiment
    }

    // MARK: - Pieces

    private static func reason(_ error: Error) -> String {
        var text = "\(error)"
        while text.hasSuffix(".") { text.removeLast() }
        return text
    }

    private static func readJournal(_ directory: String) throws -> (JournalState, PlanHeader) {
        let state: JournalState
        do { state = try Journal.read(directory: directory) } catch {
            throw ResultsError(.unreadable, "\(error)")
        }
        do { return (state, try PlanHeader(json: state.planHeader)) } catch {
            throw ResultsError(.unusable, "\(directory): its plan header cannot be read: \(error).")
        }
    }

    private static func openPlan(_ open: () throws -> PlanReader) throws -> PlanReader {
        do { return try open() } catch { throw ResultsError(.unreadable, "\(error)") }
    }

    /// The header's variants, or one group ("all") for a plan without any.
    static func groups(of header: PlanHeader) -> [ExperimentGroup] {
        header.variants.isEmpty ? [ExperimentGroup(name: "all", weight: 1, holdout: false)]
                                : header.variants.map { ExperimentGroup(name: $0.name, weight: $0.weight, holdout: $0.holdout) }
    }

    /// Every record of `plan` as a device of its variant, with the moment its
    /// journal proved it (none: `outcomes` nil, a part never started).
    private static func addRecords(of plan: PlanReader, outcomes: JournalOutcomes?, to devices: ExperimentDevices) throws {
        let fresh = devices.groups.map { ExperimentGroup(name: $0.name, weight: $0.weight, holdout: $0.holdout) }
        let tally = try count(plan, outcomes: outcomes, groups: fresh) { token, group, moment in
            devices.add(token: token, group: group, moment: moment)
        }
        // The record counts; the population was counted as the devices were added.
        devices.update { groups in
            for g in groups.indices {
                groups[g].planned += tally[g].planned
                groups[g].accepted += tally[g].accepted
                groups[g].failed += tally[g].failed
                groups[g].skipped += tally[g].skipped
                groups[g].pending += tally[g].pending
            }
        }
    }

    /// Each variant's records of a send by where they stand, summed from
    /// the plan's records and the journal's outcomes (nil: a part never
    /// started), so that they add up to the journal's totals whatever the
    /// send went through (a kill -9 included): `campaign status` counts so.
    public static func variantBooks(journal directory: String?, plan: PlanReader) throws -> [ExperimentGroup] {
        let outcomes = try directory.map { try JournalOutcomes(directory: $0) }
        return try count(plan, outcomes: outcomes, groups: groups(of: plan.header)) { _, _, _ in }
    }

    private static func count(_ plan: PlanReader, outcomes: JournalOutcomes?, groups: [ExperimentGroup],
                              device: (UnsafeBufferPointer<UInt8>, Int, Int64) -> Void) throws -> [ExperimentGroup] {
        var ordinals = [Int](repeating: 0, count: plan.header.shards)
        var cursor = JournalOutcomes.Cursor()
        var tally = groups
        do {
            while try plan.nextView({ record in
                let ordinal = ordinals[record.shard]
                ordinals[record.shard] += 1
                let g = max(0, record.variant)
                tally[g].planned += 1
                let outcome = outcomes.map { cursor.outcome(shard: record.shard, ordinal: ordinal, in: $0) } ?? .pending
                var moment = ExperimentDevices.unmeasured
                switch outcome {
                case .accepted(let at): tally[g].accepted += 1; moment = at
                case .failed: tally[g].failed += 1
                case .skipped: tally[g].skipped += 1
                case .pending: tally[g].pending += 1
                }
                device(record.token, g, moment)
            }) {}
        } catch let error as PlanError where error.reason == .noTrailer {
            // A plan cut short (a piped plan a send stopped reading): what it held counts.
        } catch {
            throw ResultsError(.unusable, "\(error)")
        }
        return tally
    }

    /// The holdout file's devices. A device's moment: a scheduled plan's, from
    /// its zone (`tz`, else the schedule's default) as the planner gives it;
    /// otherwise `start(token)`, the first run's start of the send that would
    /// have reached it. Moments still to come, or with no start, are not
    /// measured; how many is returned.
    private static func addHeldOut(path: String, header: PlanHeader, now: Int64, to devices: ExperimentDevices,
                                   start: (UnsafeBufferPointer<UInt8>) -> Int64?) throws -> Int {
        let source: FileSource
        do { source = try FileSource(path: path) } catch {
            throw ResultsError(.unreadable, "the holdout file \(path) cannot be read, and it is the only list of who was held out: give its path with --holdout FILE (\(Self.reason(error))).")
        }
        let groupByName = Dictionary(devices.groups.enumerated().map { ($1.name, $0) }, uniquingKeysWith: { a, _ in a })
        let zones = ZoneDatabase()
        var zoneCache: [String: ZoneRules] = [:]
        func rules(_ name: String) -> ZoneRules? {
            if let known = zoneCache[name] { return known }
            guard case .zone(let r) = zones.zone(named: name) else { return nil }
            zoneCache[name] = r
            return r
        }
        var unmeasured = 0
        let lines = LineReader(source: source, maxLineBytes: 1 << 20)
        var tokenBytes = [UInt8](repeating: 0, count: 128)
        while let line = try lines.next() {
            guard case .text(let number) = line else { continue }
            guard let value = lines.withCurrentLine({ try? JSONValue.parse($0) }) else {
                if lines.withCurrentLine({ $0.allSatisfy { $0 == 0x20 || $0 == 0x0A || $0 == 0x0D } }) { continue }
                throw ResultsError(.unusable, "\(path), line \(number): not a holdout line ({\"token\":\"hex\",\"variant\":…}).")
            }
            guard let hex = value["token"]?.stringValue, let variant = value["variant"]?.stringValue,
                  let g = groupByName[variant], devices.groups[g].holdout else {
                throw ResultsError(.unusable, "\(path), line \(number): not a holdout line of this plan (a token, and a variant the plan holds out).")
            }
            let count = hex.utf8.count / 2
            if tokenBytes.count < count { tokenBytes = [UInt8](repeating: 0, count: count) }
            let parsed = hex.utf8.withContiguousStorageIfAvailable { text in
                tokenBytes.withUnsafeMutableBufferPointer { DeviceToken.parseHex(text, into: $0.baseAddress!, maxBytes: $0.count) }
            }
            guard case .bytes(let n)? = parsed else {
                throw ResultsError(.unusable, "\(path), line \(number): its token is not hex.")
            }
            try tokenBytes.withUnsafeBufferPointer { all in
                let token = UnsafeBufferPointer(rebasing: all[0..<n])
                var moment: Int64?
                switch header.schedule {
                case .deliverAt(let d)?:
                    let zone = value["tz"]?.stringValue.flatMap(rules) ?? rules(d.defaultZone)
                    if let zone, let date = d.date { moment = d.moment(in: zone, on: date) }
                case .quietHours(let q)?:
                    let created = Int64(header.created)
                    let zone = value["tz"]?.stringValue.flatMap(rules) ?? rules(q.defaultZone)
                    moment = zone.map { max(q.nextAllowed(in: $0, atOrAfter: created), created) }
                case nil:
                    moment = start(token)
                }
                if let m = moment, m > now { moment = nil }
                if moment == nil { unmeasured += 1 }
                guard devices.add(token: token, group: g, moment: moment ?? ExperimentDevices.unmeasured) else {
                    throw ResultsError(.unusable, "\(path), line \(number): a device this send's plan holds (or held out twice): is it the holdout of this plan (campaign \(header.campaign))?")
                }
                devices.update { $0[g].planned += 1 }
            }
        }
        return unmeasured
    }
}
