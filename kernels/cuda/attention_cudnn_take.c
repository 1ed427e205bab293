/* attention_cudnn.h's pure part: the switch and what cuDNN's attention takes. */
#include "kernels/cuda/attention_cudnn.h"

#include <string.h>

int tr_cudnn_attention_passes(const char *value)
{
    if (!value)
        return 0;
    if (!strcmp(value, "cudnn"))
        return TR_CUDNN_FORWARD | TR_CUDNN_BACKWARD;
    if (!strcmp(value, "cudnn-forward"))
        return TR_CUDNN_FORWARD;
    if (!strcmp(value, "cudnn-backward"))
        return TR_CUDNN_BACKWARD;
    if (!strcmp(value, "cudnn-nondeterministic"))
        return TR_CUDNN_FORWARD | TR_CUDNN_BACKWARD | TR_CUDNN_NONDETERMINISTIC;
    return 0;
}

const char *tr_cudnn_attention_refusal(int B, int T, int NH, int NG, int HS, int alibi,
                                       int segments, uintptr_t pointers)
{
    if (B < 1 || T < 1 || NH < 1 || HS < 1)
        return "an empty shape";
    if (NG != NH)
        return "grouped key/value heads (qkv (B, T, NG, R+2, HS) has no single head stride)";
    if (alibi)
        return "ALiBi";
    if (segments)
        return "packed segments";
    if (HS % 8 || HS > 128)
        return "a head size that is not a multiple of 8 up to 128";
    if (pointers & 15)
        return "a tensor not 16-byte aligned";
    if ((int64_t)B * T * 3 * NH * HS > INT32_MAX)
        return "qkv past 2^31 elements";
    return NULL;
}
