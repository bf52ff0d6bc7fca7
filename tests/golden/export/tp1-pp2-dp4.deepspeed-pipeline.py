# DeepSpeed PipelineModule arguments (plansim export; DeepSpeed 0.19.6,
# deepspeed/runtime/pipe/module.py). Replace TransformerLayer with the class name
# of the model's transformer layer: the embedding goes to the first stage,
# the head to the last, and each stage gets 2 transformer layers.
PIPELINE_MODULE_KWARGS = dict(
    num_stages=2,
    partition_method="type:TransformerLayer",
    activation_checkpoint_interval=1,
)
