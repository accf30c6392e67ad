import CampaignIO
import CampaignJSON
import CampaignRules

/// A variant as the plan's header names it: `{"name":"A","weight":45}`, a
/// holdout with `"holdout":true`. Records name their variant; holdout
/// devices have no record (they are in `PLAN.holdout.ndjson`).
public struct PlanVariant: Equatable, Sendable {
    public var name: String
    public var weight: Int
    public var holdout: Bool

    public init(name: String, weight: Int, holdout: Bool = false) {
        (self.name, self.weight, self.holdout) = (name, weight, holdout)
    }

    static func json(_ variants: [PlanVariant]) -> JSONValue {
        .array(variants.map { v in
            .object([("name", .string(v.name)), ("weight", .number(String(v.weight)))] + (v.holdout ? [("holdout", .bool(true))] : []))
        })
    }

    static func list(_ value: JSONValue) throws(PlanError.Reason) -> [PlanVariant] {
        guard case .array(let items) = value, !items.isEmpty, items.count <= 255 else {
            throw .badHeader("variants must be an array of 1 to 255 {\"name\",\"weight\"[,\"holdout\"]}")
        }
        var out: [PlanVariant] = []
        for item in items {
            guard let name = item["name"]?.stringValue, !name.isEmpty, !out.contains(where: { $0.name == name }),
                  let w = item["weight"]?.integerValue, w >= 1, w <= 1_000_000 else {
                throw .badHeader("each of variants needs a unique name and a weight from 1 to 1000000")
            }
            out.append(PlanVariant(name: name, weight: Int(w), holdout: item["holdout"] == .bool(true)))
        }
        return out
    }

    /// The assigner the planner used: the variant of a token, by index into the header's list.
    public static func assigner(campaign: String, _ variants: [PlanVariant]) -> VariantAssigner {
        VariantAssigner(campaign: campaign, weights: variants.map(\.weight))
    }
}

extension PlanHeader {
    /// The index in ``variants`` of a record's variant name (the bytes inside the JSON string); nil for an unknown name.
    func variantIndex(_ name: UnsafeRawBufferPointer) -> Int? {
        variants.firstIndex { v in
            v.name.utf8.count == name.count && v.name.utf8.elementsEqual(name)
        }
    }
}
