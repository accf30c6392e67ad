import ArgumentParser
import AudienceIngest
import CampaignPayload
import LocalTime

/// `campaign validate JOB`: render every language with sample values.
struct Validate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a job file: render every message with sample values and report what would be truncated.",
        discussion: """
        Sample values come from --sample NAME=VALUE, then the job's "samples" object, \
        then a stand-in of 12 characters (1 for badge). Exits 0 when the job is valid, \
        whether or not samples are truncated.
        """
    )

    @Argument(help: "The job file (JSON).")
    var job: String

    @Option(name: .customLong("sample"), help: ArgumentHelp("A sample value for a template variable.", valueName: "name=value"))
    var samples: [String] = []

    @Flag(help: "Print only the job's campaign name (for scripts), after checking the job.")
    var campaignName = false

    @Flag(help: "Print only the job's format (h2, frame, enhanced or simple: for scripts), after checking the job.")
    var format = false

    func validate() throws {
        if campaignName && format { throw ValidationError("Give one of --campaign-name or --format.") }
        for s in samples where !s.contains("=") { throw ValidationError("--sample takes NAME=VALUE, not \"\(s)\".") }
    }

    func run() throws {
        let jobFile = try reportingErrors(as: "validate") { try CampaignJob.load(path: job) }
        if campaignName {
            print(jobFile.campaign)
            return
        }
        if format {
            print(jobFile.wire)
            return
        }
        var values = jobFile.samples
        for s in samples {
            let parts = s.split(separator: "=", maxSplits: 1)
            values[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
        }
        let renderer = PayloadRenderer(job: jobFile)
        // A variable with a default and no sample shows its default in use.
        let row = AudienceRow(line: 1, values: renderer.declarations.map { v in
            if let value = values[v.name] { return value }
            if v.defaultValue != nil { return nil }
            switch v.type {
            case .text: return v.name == "badge" ? "1" : "Sample Value"
            case .int: return "1"
            case .number: return "1.5"
            case .bool: return "true"
            }
        })
        let columns = Array(renderer.variables.indices)
        let variables = renderer.declarations.map { v in
            v.name + (v.type == .text ? "" : ":\(v.type.rawValue)") + (v.defaultValue.map { values[v.name] == nil ? " (default \"\($0)\" in use)" : " (default \"\($0)\")" } ?? "")
        }
        let h2 = jobFile.broadcast ? ", a broadcast of Live Activity updates to channels of \(jobFile.topic ?? "?") (POST /4/broadcasts/apps/\(jobFile.topic ?? "?"), each row's channel_id)"
            : jobFile.wire.isHTTP2 ? ", push type \(jobFile.pushType), topic \(jobFile.topic ?? "(the certificate's)")" : ""
        print("\(job): campaign \(jobFile.campaign), format \(jobFile.wire)\(h2), limit \(jobFile.maxPayload) bytes, variables: \(variables.joined(separator: ", "))")
        if jobFile.wire.isHTTP2, let note = PushTypeCredentials.refusal(pushType: jobFile.pushType, tokenAuthentication: false) { print("  \(note)") }
        switch jobFile.schedule {
        case .deliverAt(let d)?:
            print("  scheduled: \(d.localTime) on each device's clock (its tz column), \(d.date.map { "on \($0)" } ?? "on the first date it is still to come everywhere"), window \(d.windowText), late: \(d.late.rawValue), default zone \(d.defaultZone)")
            if let date = d.date {
                let span = d.moments(on: date), now = Int64(wallClockSeconds())
                if now > span.upperBound + Int64(d.windowSeconds) {
                    printError("campaign validate: warning: deliverAt.date \(date) is past: \(d.localTime) and its window are over in every zone, so " + (d.late == .skip ? "late: skip would skip every device (plan refuses such a job)" : "every device would be sent to at once, late"))
                } else if now > span.lowerBound {
                    printError("campaign validate: warning: deliverAt.date \(date) has begun: \(d.localTime) has passed in the zones furthest ahead, whose devices go late (late: \(d.late.rawValue))")
                }
            }
        case .quietHours(let q)?:
            print("  scheduled: never \(q.from)–\(q.to) on each device's clock (its tz column), default zone \(q.defaultZone)")
        case nil: break
        }
        var out: [UInt8] = []
        for (i, message) in jobFile.messages.enumerated() {
            var full: [UInt8] = []
            let unlimited = renderer.render(message: i, row: row, columns: columns, maxBytes: 1 << 20, into: &full)
            let outcome = renderer.render(message: i, row: row, columns: columns, maxBytes: jobFile.maxPayload, into: &out)
            let verdict: String
            switch outcome {
            case .fitted: verdict = "fits (\(out.count) bytes)"
            case .truncated: verdict = "truncated by \(full.count - out.count) bytes (\(full.count) → \(out.count))"
            case .cannotFit(let n): verdict = jobFile.broadcast ? "cannot fit: \(n) bytes, and a broadcast has no alert to shorten" : "cannot fit: \(n) bytes even with an empty alert"
            case .missingVariable(let name): verdict = "missing sample for \(name)"
            case .invalidBadge(let v): verdict = "badge sample \"\(v)\" is not a whole number"
            case .invalidValue(let name, let type, let v): verdict = "sample \"\(v)\" for {\(name):\(type.rawValue)} is not of its type"
            case .invalidChannelID(let name, let v): verdict = "sample \"\(v)\" for {\(name)} is not a channel id (canonical base64)"
            }
            _ = unlimited
            // A job with variants: each message under its variant's name.
            let variant = jobFile.variants.first { $0.messages.contains(i) }.map { "variant \($0.name), " } ?? ""
            print("  \(variant)\(message.tag): \(verdict)")
            print("    \(String(decoding: out, as: UTF8.self))")
        }
        if jobFile.fallbackIsTheFirstMessage {
            print("  fallback: none given: a channel whose row has no lang, or one without a message, gets the first message (\(jobFile.fallback[0]))")
        } else {
            let fallback = jobFile.fallback.isEmpty ? "none (devices in other languages are rejected)" : jobFile.fallback.joined(separator: " → ")
            for (language, chain) in jobFile.fallbackByLanguage.sorted(by: { $0.key < $1.key }) {
                print("  fallback for \(language): \(chain.isEmpty ? "none" : chain.joined(separator: " → "))")
            }
            print("  fallback\(jobFile.fallbackByLanguage.isEmpty ? "" : " for every other language"): \(fallback)")
        }
        // The campaign rules, as plan --ledger and send --ledger will apply them.
        if !jobFile.variants.isEmpty {
            let total = jobFile.variants.reduce(0) { $0 + $1.weight }
            let shares = jobFile.variants.map { v in
                "\(v.name) \(v.weight)/\(total)\(v.holdout ? " (holdout: planned into PLAN.holdout.ndjson, never sent)" : "")"
            }
            print("  variants: " + shares.joined(separator: ", "))
        }
        if let cap = jobFile.frequencyCap {
            print("  frequencyCap: at most \(cap.max) notification\(cap.max == 1 ? "" : "s") of scope \"\(cap.scope)\" per device per \(DeliverAt.durationText(cap.perSeconds)) (with plan --ledger and send --ledger)")
        }
    }
}
