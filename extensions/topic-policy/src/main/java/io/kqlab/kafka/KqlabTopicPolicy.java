package io.kqlab.kafka;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.server.policy.AlterConfigPolicy;
import org.apache.kafka.server.policy.CreateTopicPolicy;

/**
 * kqlab's exported topic requirements as a KIP-108 / KIP-133 broker policy.
 *
 * <p>A record policy is vetted in kqlab by replaying sampled records under the topic configs the
 * policy states (compaction, size limit, timestamp bounds ...); production behaves as the replay
 * predicted only while the topics keep them.  This class refuses, with POLICY_VIOLATION (44) and
 * a message naming each broken requirement, the topic creations and topic config changes that
 * would break them.  It never sees records.
 *
 * <p>Enable it with {@code create.topic.policy.class.name} and {@code alter.config.policy.class.name}
 * set to this class, the jar on the broker's classpath, and {@code kqlab.topic.policy.file}
 * naming the requirements file.  In KRaft the policies run on the controller: put all three on
 * every controller (here, combined broker+controller nodes).
 *
 * <p>What it judges: on creation, every requirement of every scope binding the topic, a key the
 * request does not set taken as the topic will get it (the broker's synonym from its static
 * config, else Kafka's default for the policy's broker version, both from the file); on a config
 * change, the keys the change names (a deletion reverts to that default).  Kafka passes the
 * policy only the keys a change names: a legacy AlterConfigs that omits a key resets it without
 * the policy seeing it (KAFKA-14195), and a broker-level (cluster default) change is not judged.
 */
public class KqlabTopicPolicy implements CreateTopicPolicy, AlterConfigPolicy {

    /** The broker config naming the requirements file. */
    public static final String FILE_CONFIG = "kqlab.topic.policy.file";

    private TopicRequirements requirements;
    private final Map<String, String> brokerConfigs = new HashMap<>();

    @Override
    public void configure(Map<String, ?> configs) {
        Object file = configs.get(FILE_CONFIG);
        if (file == null || file.toString().isBlank()) {
            throw new ConfigException(FILE_CONFIG + " is not set: name the requirements file "
                + "`kqlab export --target topic-policy` wrote (topic-policy/kqlab-topic-policy.properties)");
        }
        requirements = TopicRequirements.load(Path.of(file.toString()));
        for (Map.Entry<String, ?> e : configs.entrySet()) {
            if (e.getValue() != null) {
                brokerConfigs.put(e.getKey(), String.valueOf(e.getValue()));
            }
        }
    }

    @Override
    public void validate(CreateTopicPolicy.RequestMetadata request) throws PolicyViolationException {
        String topic = request.topic();
        Map<String, String> configs = request.configs() == null ? Map.of() : request.configs();
        List<String> broken = new ArrayList<>();
        String scopes = "";
        for (TopicRequirements.Scope s : requirements.scopes) {
            if (!s.binds(topic)) {
                continue;
            }
            scopes = scopes.isEmpty() ? s.name() : scopes + ", " + s.name();
            Integer partitions = request.numPartitions();
            Integer rf = request.replicationFactor() == null ? null : (int) request.replicationFactor();
            if (request.replicasAssignments() != null && !request.replicasAssignments().isEmpty()) {
                partitions = request.replicasAssignments().size();
                rf = request.replicasAssignments().values().stream().mapToInt(List::size).min().orElse(0);
            }
            if (s.partitions() != null && partitions != null && !s.partitions().holds(partitions)) {
                broken.add(s.partitions().sentence("the partition count") + ", the request asks " + partitions);
            }
            if (s.replicationFactor() != null && rf != null && !s.replicationFactor().holds(rf)) {
                broken.add(s.replicationFactor().sentence("the replication factor") + ", the request asks " + rf);
            }
            for (TopicRequirements.Requirement q : s.requirements()) {
                judge(q, configs.get(q.config()), "the request sets ",
                      "the request does not set it, so it would be the default ", broken);
            }
        }
        refuse("creating", topic, scopes, broken);
    }

    @Override
    public void validate(AlterConfigPolicy.RequestMetadata request) throws PolicyViolationException {
        ConfigResource resource = request.resource();
        if (resource.type() != ConfigResource.Type.TOPIC) {
            return;
        }
        String topic = resource.name();
        Map<String, String> configs = request.configs() == null ? Map.of() : request.configs();
        List<String> broken = new ArrayList<>();
        String scopes = "";
        for (TopicRequirements.Scope s : requirements.scopes) {
            if (!s.binds(topic)) {
                continue;
            }
            scopes = scopes.isEmpty() ? s.name() : scopes + ", " + s.name();
            for (TopicRequirements.Requirement q : s.requirements()) {
                if (configs.containsKey(q.config())) {
                    judge(q, configs.get(q.config()), "the change sets ",
                          "the change deletes it, reverting to the default ", broken);
                }
            }
        }
        refuse("changing the configs of", topic, scopes, broken);
    }

    /**
     * Judge one requirement against the value a request gives its key ({@code null}: the key
     * is unset, so the topic gets the broker's fallback); a broken one is added to
     * {@code broken}, worded with how the request came to that value.
     */
    private void judge(TopicRequirements.Requirement q, String given, String setWording,
                       String unsetWording, List<String> broken) {
        String actual = given == null ? fallback(q.config()) : given;
        String source = (given == null ? unsetWording : setWording) + actual;
        if (!q.holds(actual)) {
            broken.add(explain(q, source));
        }
    }

    /** What a key no request sets becomes: the broker's synonym, else Kafka's default. */
    private String fallback(String config) {
        String synonym = requirements.synonyms.get(config);
        if (synonym != null && brokerConfigs.containsKey(synonym)) {
            return brokerConfigs.get(synonym);
        }
        return requirements.defaults.get(config);
    }

    private static String explain(TopicRequirements.Requirement q, String source) {
        String why = q.why().isEmpty() ? "" : " (" + q.why() + ")";
        return q.sentence() + ", " + source + why;
    }

    private static void refuse(String action, String topic, String scopes, List<String> broken) {
        if (broken.isEmpty()) {
            return;
        }
        throw new PolicyViolationException("kqlab topic policy " + scopes + " refuses " + action
            + " topic " + topic + ": " + String.join("; ", broken));
    }

    @Override
    public void close() {
        // nothing held open: the file is read once, in configure()
    }
}
